"""One ATOM server's configuration as the pieces under test read it: the fields of ATOM's
``Config`` (``atom_config``) and the lmcache and offload environment
(``lmcache_env``), both from a ``ServerSpec``. Read in both server processes."""

from __future__ import annotations

import os
from types import SimpleNamespace

from kvfault.faults.atom.spec import ServerSpec


def atom_config(spec: ServerSpec, pp_rank: int = 0, instance_id: str = "") -> SimpleNamespace:
    """The fields of ATOM's ``Config`` that its scheduler, block manager and offload
    connector read, for a small dense model (``spec.layers`` layers, ``spec.kv_heads`` KV
    heads of ``spec.head_dim``: 2 and 2 unless the row widens it),
    or with ``spec.layout`` "hybrid" a small DeepSeek-V4 model (``_as_hybrid``),
    as pipeline stage ``pp_rank`` of ``spec.pp_size`` reads them.

    ``instance_id`` is the one field that is not ATOM's: the token the fixed ATOM of
    finding 4 (``--atom-fix two_servers``) draws once per server as its main process
    builds the ``Config``, which every process of that server then reads from the
    pickled ``Config``; ATOM's main has no such field and never reads it."""
    hf = SimpleNamespace(
        architectures=["LlamaForCausalLM"],
        sliding_window=None,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.kv_heads,
        num_key_value_heads=spec.kv_heads,
        head_dim=spec.head_dim,
        hidden_size=spec.kv_heads * spec.head_dim,
        model_type="llama",
    )
    config = SimpleNamespace(
        model="kvfault-toy",
        port=spec.port,
        instance_id=instance_id,
        hf_config=hf,
        kv_transfer_config={"kv_connector": "lmcache_offload", "kv_role": "offload"},
        kv_cache_block_size=spec.block_size,
        num_kvcache_blocks=spec.num_blocks,
        kv_cache_dtype=spec.kv_cache_dtype,
        enable_prefix_caching=spec.prefix_caching,
        enable_chunked_prefill=True,
        max_num_seqs=spec.max_num_seqs,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        long_prefill_token_threshold=0,
        decode_context_parallel_size=1,
        prefill_context_parallel_size=1,
        max_model_len=spec.max_model_len,
        bos_token_id=1,
        eos_token_id=-1,
        stop_token_ids=[],
        scheduler_delay_factor=0.0,
        speculative_config=None,
        tensor_parallel_size=spec.tp_size,
        tp_world_size=spec.tp_size,
        pipeline_parallel_size=spec.pp_size,
        data_parallel_size=1,
        parallel_config=SimpleNamespace(
            data_parallel_rank=spec.dp_rank,
            data_parallel_size=1,
            pipeline_parallel_rank=pp_rank,
        ),
        kv_events_config=None,
        enforce_eager=True,
    )
    return _as_hybrid(config, spec) if spec.layout == "hybrid" else config


def _as_hybrid(config: SimpleNamespace, spec: ServerSpec) -> SimpleNamespace:
    """``config`` for a small DeepSeek-V4 model, which ATOM's offload serves with its
    hybrid (PAGE/SLOT) connector (ATOM picks it from ``compress_ratios``): two layers,
    one CSA (compress ratio 4) and one HCA (128), KV head dim 64, index head dim 128 (an
    FP8 indexer), a 16-token sliding window, bf16 KV. ATOM's DSV4 block is 256 tokens
    (``spec.block_size`` must say so); a SLOT checkpoint every chunk."""
    config.hf_config = SimpleNamespace(
        architectures=["DeepseekV4ForCausalLM"],
        model_type="deepseek_v4",
        compress_ratios=[4, 128],
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        kv_head_dim=64,
        hidden_size=128,
        index_head_dim=128,
        index_topk=64,
        qk_rope_head_dim=32,
        sliding_window=16,
    )
    config.model = "kvfault-toy-dsv4"
    config.index_cache_dtype = "fp8"
    config.state_checkpoint_interval_tokens = spec.chunk_size
    return config


def lmcache_env(spec: ServerSpec, host_dir: str) -> dict[str, str]:
    """The ``LMCACHE_*`` and ``OFFLOAD_*`` environment ATOM's offload reads, and where
    lmcache keeps its metrics files. A local disk, a shared tier and the metrics files
    live in ``host_dir`` (removed with the host)."""
    env = {
        # lmcache's engine keeps its metrics files here, /tmp/lmcache_prometheus unless
        # told: one directory of the host's, gone with it.
        "PROMETHEUS_MULTIPROC_DIR": os.path.join(host_dir, "prometheus"),
        "LMCACHE_CHUNK_SIZE": str(spec.chunk_size),
        "LMCACHE_LOCAL_CPU": "True",
        "LMCACHE_MAX_LOCAL_CPU_SIZE": str(spec.cpu_cache_gib),
        "OFFLOAD_MIN_LOAD_TOKENS": str(spec.min_load_tokens),
        "LMCACHE_LOOKUP_TIMEOUT_MS": str(spec.lookup_timeout_ms),
        "LMCACHE_SAVE_UNFULL_CHUNK": str(spec.save_unfull_chunk),
        "OFFLOAD_SLOT_STAGING_SLOTS": str(spec.slot_staging_rows),
    }
    if spec.faults.pin_timeout_s:
        env["LMCACHE_PIN_TIMEOUT_SEC"] = str(spec.faults.pin_timeout_s)
        env["LMCACHE_PIN_CHECK_INTERVAL_SEC"] = "1"
    if spec.local_disk:
        env["LMCACHE_LOCAL_DISK"] = "file://" + local_disk_dir(spec, host_dir) + "/"
    if spec.disk_size_gib > 0:
        env["LMCACHE_MAX_LOCAL_DISK_SIZE"] = str(spec.disk_size_gib)
    if spec.shared_tier:
        # lmcache's URL grammar wants a host and port; the fs connector reads the path.
        env["LMCACHE_REMOTE_URL"] = "fs://localhost:0" + shared_tier_dir(host_dir)
        env["LMCACHE_REMOTE_SERDE"] = "naive"
    return env


def local_disk_dir(spec: ServerSpec, host_dir: str) -> str:
    """The directory of ``spec``'s lmcache local disk (one per server)."""
    return os.path.join(host_dir, f"disk-{spec.name}")


def shared_tier_dir(host_dir: str) -> str:
    """The directory of lmcache's remote tier (its fs connector) that the host's
    servers with ``shared_tier`` share."""
    return os.path.join(host_dir, "shared-tier")


def use_lmcache_env(spec: ServerSpec, host_dir: str) -> None:
    """Set this process's environment to exactly ``lmcache_env``'s ``LMCACHE_*`` and
    ``OFFLOAD_*`` variables: none of the user's own reaches the server under test."""
    env = lmcache_env(spec, host_dir)
    for name in [n for n in os.environ if n.startswith(("LMCACHE_", "OFFLOAD_"))]:
        if name not in env:
            del os.environ[name]
    os.environ.update(env)
