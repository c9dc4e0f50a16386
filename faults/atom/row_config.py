"""What each row of the ``atom`` tier runs, against ATOM's defaults: the servers its
story starts (``servers``: the story told to a host that starts nothing) and each
server's settings where they differ from what a user of ATOM gets by default
(``differences``), for ``kvfault list --tier atom``. Imports nothing of ATOM."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvfault.faults.atom.spec import AtomRequest, ServerSpec

# What a user of ATOM's dense offload connector gets without setting anything
# (ATOM's Config, lmcache's environment defaults, ATOM's OFFLOAD_MIN_LOAD_TOKENS), by
# ServerSpec field, with how it is shown.
ATOM_DEFAULTS: dict[str, tuple[object, str]] = {
    "tp_size": (1, "TP"),
    "pp_size": (1, "PP"),
    "block_size": (16, "block size"),
    "chunk_size": (256, "lmcache chunk"),
    "min_load_tokens": (8192, "min load tokens"),
    "prefix_caching": (True, "HBM prefix cache"),
    "deferred_output": (True, "deferred output"),
    "kv_cache_dtype": ("bf16", "KV dtype"),
    "max_num_seqs": (512, "max seqs"),
    "max_num_batched_tokens": (16384, "max batched tokens"),
    "cpu_cache_gib": (5.0, "CPU pool GiB"),
    "lookup_timeout_ms": (3000, "lookup timeout ms"),
    "save_unfull_chunk": (False, "lmcache save unfull chunk"),
    "slot_staging_rows": (1, "SLOT staging rows"),
    "local_disk": (False, "local disk"),
    "shared_tier": (False, "remote tier (fs://)"),
}
# Where ATOM's default differs for the model of a layout: for every DeepSeek-V4 model
# ATOM's Config forces a KV block of 256 tokens (atom/config.py, its __post_init__).
MODEL_DEFAULTS: dict[str, dict[str, object]] = {"hybrid": {"block_size": 256}}
# ATOM's Config.state_checkpoint_interval_tokens: a DeepSeek-V4 state checkpoint (and
# the offload's SLOT sidecar) every this many tokens.
ATOM_CHECKPOINT_INTERVAL = 8192
# The hybrid servers' CSA indexer against ATOM's default for it: with an offload or
# transfer connector configured ATOM's Config picks FP8; without one FP4 (except on
# gfx942), which ATOM's offload refuses (deepseek_v4_attn.py, get_kv_transfer_tensors).
HYBRID_INDEXER = (
    "indexer fp8 (= ATOM's with offload on; without it ATOM's is fp4 except on gfx942, "
    "which its offload refuses)"
)
# What every row runs unless its line says otherwise (the TP and PP sizes), and what no
# row varies yet (docs/atom/tier.md's coverage table).
FIXED = "dense connector, TP 1 (one worker rank), PP 1, a model of 2 layers and 2 KV heads"


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def atom_default(spec: ServerSpec, name: str) -> object:
    """ATOM's default of ``ATOM_DEFAULTS``' setting ``name`` for ``spec``'s model."""
    return MODEL_DEFAULTS.get(spec.layout, {}).get(name, ATOM_DEFAULTS[name][0])


def differences(spec: ServerSpec, base: ServerSpec | None = None) -> list[str]:
    """``spec``'s settings that differ from ``base`` (default: ATOM's defaults), as
    ``name VALUE (ATOM: DEFAULT)``, DEFAULT being ATOM's for ``spec``'s model; the KV
    layout (head size, KV heads and layers), DP rank, machine and hash seeds where set."""
    out = []
    if spec.layout == "hybrid":
        out.append("DeepSeek-V4 model, hybrid (PAGE/SLOT) connector, " + HYBRID_INDEXER)
        # the tier's hybrid config checkpoints the state every lmcache chunk
        if spec.chunk_size != ATOM_CHECKPOINT_INTERVAL:
            out.append(
                f"state checkpoint every {spec.chunk_size} tokens (ATOM: {ATOM_CHECKPOINT_INTERVAL})"
            )
    for name, (_, label) in ATOM_DEFAULTS.items():
        value, default = getattr(spec, name), atom_default(spec, name)
        if value != (default if base is None else getattr(base, name)):
            same = " (= ATOM's)" if value == default else f" (ATOM: {_shown(default)})"
            out.append(f"{label} {_shown(value)}{same}")
    if base is not None and spec.num_blocks != base.num_blocks:
        out.append(f"HBM blocks {spec.num_blocks}")
    if base is None:
        out.append(f"HBM blocks {spec.num_blocks} (ATOM: what GPU memory holds)")
    if spec.port != ServerSpec.port:
        out.append(f"port {spec.port}")
    if spec.head_dim != ServerSpec.head_dim:
        out.append(f"head dim {spec.head_dim}")
    if (spec.kv_heads, spec.layers) != (ServerSpec.kv_heads, ServerSpec.layers):
        out.append(f"{spec.kv_heads} KV heads, {spec.layers} layers")
    if spec.dp_rank:
        out.append(f"DP rank {spec.dp_rank}")
    if spec.replica_of:
        out.append(f"a DP replica of {spec.replica_of}")
    if spec.machine:
        out.append(f"on machine {spec.machine}")
    if spec.faults.rank >= 0:
        which = "worker" if spec.pp_size > 1 else "TP rank"
        out.append(f"faults on {which} {spec.faults.rank} only")
    for side in ("scheduler", "worker"):
        seed = getattr(spec, f"{side}_hash_seed")
        if seed is not None:
            out.append(f"{side} PYTHONHASHSEED {seed}")
    return out


def tier_settings() -> str:
    """What every row runs unless its own line says otherwise: the fixed shape and the
    tier's server settings against ATOM's defaults."""
    return f"{FIXED}; {', '.join(differences(ServerSpec('')))}"


@dataclass
class _DryServer:
    """A server that runs nothing: what a story asks of it is answered at once."""

    spec: ServerSpec

    def submit(self, requests: list[AtomRequest]) -> None:
        pass

    def run(self, limit_s: float, until_answered: bool = False) -> bool:
        return True

    def quiescent(self) -> None:
        pass

    def wait_stored(
        self, tokens: list[int], want: int, limit_s: float, backend: str | None = None
    ) -> bool:
        return True

    def settle(self, limit_s: float) -> bool:
        return True

    def shut_down(self) -> None:
        pass


@dataclass
class _DryHost:
    """Records the specs of the servers a story starts (restarts count once)."""

    specs: list[ServerSpec] = field(default_factory=list)
    # The servers started, as ``AtomHost.servers`` (a story may tell its last one).
    servers: list[_DryServer] = field(default_factory=list)

    def start(self, spec: ServerSpec) -> _DryServer:
        self.specs.append(spec)
        self.servers.append(_DryServer(spec))
        return self.servers[-1]

    def restart(self, server: _DryServer, **changes: Any) -> _DryServer:
        return server

    def note_fault(self, injector: str, **evidence: Any) -> None:
        pass


def servers(row: Any, tp_size: int = 1, pp_size: int = 1) -> list[ServerSpec]:
    """The servers ``row`` (``kvfault.faults.atom.catalog.AtomRow``) starts, with its fault's
    setting changes applied, from its story told to a host that starts nothing (with
    ``--atom-tp tp_size --atom-pp pp_size``)."""
    from kvfault.faults.atom.scenarios import AtomRun

    host = _DryHost()
    run = AtomRun(
        host,  # type: ignore[arg-type]  # a host that starts nothing
        0,
        faults=row.faults,
        faulted=row.faulted,
        spec_changes=dict(row.spec_changes),
        injector=None,
        tp_size=tp_size,
        pp_size=pp_size,
    )
    row.story(run)
    return host.specs


def configuration(row: Any) -> str:
    """One line: each server of ``row`` and how its settings differ from the tier's
    (``tier_settings``), each with ATOM's default."""
    parts = []
    for spec in servers(row):
        diff = differences(spec, ServerSpec(""))
        parts.append(f"{spec.name}: {', '.join(diff) if diff else 'the tier settings'}")
    return "; ".join(parts)
