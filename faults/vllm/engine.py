"""One vLLM server in a forked process: vLLM's real v1 ``Scheduler`` (its
``KVCacheManager``, block pool and prefix hashing) with LMCache's real
``LMCacheMPConnector`` in both roles, talking to a real lmcache MP server; only the
model runner is this module's (``FakeRunner``).

What stands in for what (docs/vllm/tier.md):

- ``FakeRunner.execute`` is vLLM's ``GPUModelRunner.execute_model`` with the KV
  connector mixin around it: bind the step's connector metadata, ``start_load_kv``,
  the forward, ``wait_for_save``, ``get_finished`` and ``get_block_ids_with_load_errors``
  into the ``ModelRunnerOutput``'s ``KVConnectorOutput``, then clear the metadata.
- The forward is ``kvfault.fakes.model.DeterministicModel`` writing page fingerprints into the
  KV tensors (``kvfault.faults.vllm.pages``) and sampling its tokens from them.
- KV tensors are host memory. LMCache's worker connector picks its engine-driven
  transfer (gather/scatter through the server's shared-memory pool) for a CPU tensor,
  so no CUDA IPC is faked: lmcache's own worker code copies the blocks.
- The engine core's loop is ``Server.step``: ``schedule`` then ``update_from_output``,
  as ``EngineCore.step`` does with one in-flight batch.

Faults act on the runner's output on its way to the scheduler (what vLLM's executor
and ``KVOutputAggregator`` hand over), or on the scheduler's inbox (an abort).
Everything recorded is a plain dict (``kvfault.faults.vllm.events``); nothing here is imported
by the campaign process.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from kvfault.faults.vllm.events import EventLog
from kvfault.faults.vllm.pages import TensorPages
from kvfault.faults.vllm.spec import BLOCK_SIZE, CHUNK_SIZE, PICTURE_TOKENS, RunSpec, placeholders

LAYERS = ("model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn")
KV_HEADS, HEAD_SIZE = 2, 16
MODEL_JSON = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": KV_HEADS,
    "num_hidden_layers": len(LAYERS),
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def write_model(directory: Path) -> str:
    """A Llama-shaped ``config.json`` (no weights: nothing is loaded or downloaded).
    Its path is the model name lmcache keys with, so each run's directory is its own
    namespace on a server that outlives runs."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(MODEL_JSON))
    return str(directory)


class EngineDied(Exception):
    """vLLM's scheduler raised: in vLLM the EngineCore process dies with it."""


class Server:
    """One vLLM engine: scheduler and worker connector, the fake runner, the faults."""

    def __init__(self, name: str, spec: RunSpec, model_dir: str, log: EventLog, faults: Any):
        import torch
        from vllm.config import (
            CacheConfig,
            DeviceConfig,
            KVTransferConfig,
            ModelConfig,
            SchedulerConfig,
            VllmConfig,
        )
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.structured_output import StructuredOutputManager

        self.name = name
        self.log = log
        self.faults = faults
        model = ModelConfig(
            model=model_dir, skip_tokenizer_init=True, max_model_len=2048, dtype="float32", seed=0
        )
        extra = {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": spec.lmcache_port}
        config = VllmConfig(
            model_config=model,
            cache_config=CacheConfig(
                block_size=BLOCK_SIZE, enable_prefix_caching=spec.prefix_caching
            ),
            scheduler_config=SchedulerConfig(
                max_num_seqs=8,
                max_num_batched_tokens=spec.batch_tokens,
                max_model_len=2048,
                is_encoder_decoder=False,
            ),
            device_config=DeviceConfig("cpu"),
            kv_transfer_config=KVTransferConfig(
                kv_connector="LMCacheMPConnector",
                kv_role="kv_both",
                kv_connector_extra_config=extra,
                kv_load_failure_policy=spec.policy,
            ),
        )
        # What the engine core resolves before it builds the scheduler (its memory
        # profile and the attention backend's layout), fixed here.
        config.cache_config.num_gpu_blocks = spec.num_blocks
        config.cache_config.kv_cache_layout = "LBNHC"
        attn = FullAttentionSpec(
            block_size=BLOCK_SIZE, num_kv_heads=KV_HEADS, head_size=HEAD_SIZE, dtype=torch.float32
        )
        kv_config = KVCacheConfig(
            num_blocks=spec.num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(list(LAYERS), attn)],
        )
        self.scheduler = Scheduler(
            config, kv_config, StructuredOutputManager(config), block_size=BLOCK_SIZE
        )
        self.model_id = model_dir
        if spec.pictures:
            self._encoder_budget(config)
        if spec.fix:
            from kvfault.faults.vllm.fix import guard_completions

            guard_completions(self.scheduler, log)
        self.worker = KVConnectorFactory.create_connector(config, KVConnectorRole.WORKER, kv_config)
        shape = (2, spec.num_blocks, BLOCK_SIZE, KV_HEADS, HEAD_SIZE)
        tensors = {layer: torch.zeros(shape, dtype=torch.float32) for layer in LAYERS}
        self.worker.register_kv_caches(tensors)
        self.binds = self._endpoints(spec)
        for path in self.binds:
            log.record("bind", path=path, server=name)
        self.pages = TensorPages(torch, tensors)
        faults.wrap_worker(self)
        self.runner = FakeRunner(self)
        self.loads_applied: set[tuple[str, int, str]] = set()  # load ops vLLM applied
        self.keys = ChunkKeys()
        self._observe_connector()

    def _encoder_budget(self, config: Any) -> None:
        """What a multimodal model's ``MultiModalBudget`` gives the scheduler (its
        processor's tokens per picture), which the tier's text-only config cannot: vLLM's
        own ``compute_mm_encoder_budget`` for a ``PICTURE_TOKENS``-token picture. Without
        it a request with a picture is never scheduled (the encoder budget is 0)."""
        from vllm.v1.core.encoder_cache_manager import (
            EncoderCacheManager,
            compute_mm_encoder_budget,
        )

        budget, size = compute_mm_encoder_budget(config.scheduler_config, {"image": PICTURE_TOKENS})
        self.scheduler.max_num_encoder_input_tokens = budget
        self.scheduler.encoder_cache_manager = EncoderCacheManager(cache_size=size)

    def _endpoints(self, spec: RunSpec) -> list[str]:
        """What this server set holds on the host: the lmcache server's endpoint it
        reaches, and the shared-memory pool lmcache's worker mapped (named as the server
        advertised it, with the inode the worker's mapping has: two sets that map one
        segment share its inode even when one name was unlinked and reused)."""
        paths = [f"tcp://127.0.0.1:{spec.lmcache_port}"]
        shm: Any = getattr(self.worker.worker_adapter.transfer_ctx, "_engine_driven_context", None)
        handle = getattr(shm, "_shm", None)
        if handle is not None:
            inode = os.fstat(handle._fd).st_ino
            paths.append(f"/dev/shm/{shm._shm_name} (inode {inode})")
        return paths

    # -- observers (they change nothing) ---------------------------------------------
    def _observe_connector(self) -> None:
        connector = self.scheduler.connector
        match = connector.get_num_new_matched_tokens
        log = self.log
        adapter = connector.scheduler_adapter
        submit = adapter.maybe_submit_lookup_request
        asked: dict[str, list[int]] = {}  # the token ids each lookup sent the server

        def maybe_submit_lookup_request(request_id: str, token_ids: Any, *a: Any, **k: Any) -> Any:
            asked[request_id] = list(token_ids)
            return submit(request_id, token_ids, *a, **k)

        adapter.maybe_submit_lookup_request = maybe_submit_lookup_request

        def get_num_new_matched_tokens(request: Any, num_computed_tokens: int) -> Any:
            got = match(request, num_computed_tokens)
            n, is_async = got
            if n is not None:
                rid = request.request_id
                kf = self.runner.kf.get(rid)
                if rid in asked and kf is not None:
                    keys = self.keys.of(asked[rid])
                    log.record("key", req_id=rid, site="lookup", seed=kf.cache_seed,
                               first=keys[0] if keys else None)  # fmt: skip
                hit = num_computed_tokens + n
                log.record(
                    "lookup", req_id=request.request_id, prompt_len=request.num_prompt_tokens,
                    kv_hit=hit if n else 0, kv_end=hit if n else 0, claim=hit,
                    hbm_hit=num_computed_tokens, hybrid=False, is_async=bool(is_async),
                    server=self.name, vllm_block_hash=_first_hash(request),
                )  # fmt: skip
            return got

        connector.get_num_new_matched_tokens = get_num_new_matched_tokens

    # -- the engine core's step ------------------------------------------------------
    def add(self, request: Any) -> None:
        self.log.record("arrive", req_id=request.request_id, server=self.name)
        self.scheduler.add_request(request)

    def abort(self, req_id: str) -> None:
        from vllm.v1.request import RequestStatus

        self.scheduler.finish_requests(req_id, RequestStatus.FINISHED_ABORTED)

    def step(self) -> list[Any]:
        """One ``EngineCore.step``: schedule, run, update. Returns the finished
        requests' outputs. ``EngineDied`` when the scheduler raised."""
        self.log.step += 1
        output = self.scheduler.schedule()
        runner_output = self.runner.execute(output)
        kv_out = runner_output.kv_connector_output
        if kv_out is not None:
            kv_out = self.faults.deliver(self, kv_out)
            runner_output.kv_connector_output = kv_out
            for rid in sorted(kv_out.finished_recving or ()):
                self.log.record("delivered", op=self.runner.load_op(rid))
        # Where EngineCore.step applies the aborts that arrived during the forward
        # (its _process_aborts_queue, vllm/v1/engine/core.py:678-683).
        self.faults.before_update(self, kv_out)
        try:
            outs = self.scheduler.update_from_output(output, runner_output)
        except Exception as exc:  # vLLM's EngineCore dies on any scheduler error
            raise EngineDied(exc) from exc
        if kv_out is not None:
            self._applied(kv_out)
        done = []
        for core_outputs in outs.values():
            for o in core_outputs.outputs:
                self.runner.tokens.setdefault(o.request_id, []).extend(o.new_token_ids)
                if o.finish_reason is not None:
                    done.append(o)
        return done

    def _applied(self, kv_out: Any) -> None:
        """What the scheduler took of a delivery it survived: a request's first load
        completion is applied (failed when its blocks were reported), any later one is
        stale; a save is done when the request's stores are reported."""
        bad = set(kv_out.invalid_block_ids or ())
        for rid in sorted(kv_out.finished_recving or ()):
            op = self.runner.load_op(rid)
            if op in self.loads_applied:
                self.log.record("completion_applied", op=op, stale=True)
                continue
            self.loads_applied.add(op)
            failed = bool(bad & set(self.runner.load_blocks.get(rid, ())))
            outcome = "failed" if failed else "finished"
            self.log.record("completion_applied", op=op, outcome=outcome)
        for rid in sorted(kv_out.finished_sending or ()):
            for gen in range(self.runner.saves.get(rid, 0)):
                self.log.record("save_done", op=(rid, gen, "save"))

    def idle(self) -> bool:
        s = self.scheduler
        return not s.requests and not s.waiting and not s.running

    def quiescent(self) -> None:
        s = self.scheduler
        pool = s.kv_cache_manager.block_pool
        in_use = pool.num_gpu_blocks - 1 - pool.get_num_free_blocks()
        self.log.record(
            "quiescent", engine=self.name, hbm_blocks=in_use,
            unfinished=len(s.requests), loads_pending=len(s.finished_recving_kv_req_ids),
        )  # fmt: skip

    def close(self) -> None:
        for path in self.binds:
            self.log.record("unbind", path=path, server=self.name)
        for part in (self.worker, self.scheduler.connector):
            try:
                part.shutdown()
            except Exception:  # best effort: the process exits next
                pass


class FakeRunner:
    """vLLM's model runner with its KV-connector mixin, on the host (module docstring)."""

    def __init__(self, server: Server):
        from kvfault.fakes.model import DeterministicModel
        from kvfault.reference.types import Geometry

        self.server = server
        self.model = DeterministicModel(
            "dense", Geometry(block_size=BLOCK_SIZE, chunk_size=CHUNK_SIZE, prefill_budget=512)
        )
        self.kf: dict[str, Any] = {}  # kvfault's view of each request (the judge's)
        self.outputs: dict[str, tuple[int, ...]] = {}
        self.tokens: dict[str, list[int]] = {}
        self.load_blocks: dict[str, list[int]] = {}
        self.load_range: dict[str, tuple[int, int]] = {}
        self.saves: dict[str, int] = {}
        self.load_gens: dict[str, int] = {}  # a request's latest load (preempted: again)
        self.forwards = 0
        # Each request as vLLM hands it to the runner (``NewRequestData``): its prompt
        # ids, its output length, its pictures (``mm_features``); and the encoder's
        # outputs by picture identifier, as ``GPUModelRunner.encoder_cache`` keeps them.
        self.seen: dict[str, tuple[tuple[int, ...], int]] = {}
        self.features: dict[str, list[Any]] = {}
        self.encoder_cache: dict[str, bytes] = {}

    def load_op(self, rid: str) -> tuple[str, int, str]:
        """The operation id of ``rid``'s latest load: its generation counts the loads
        the request dispatched before (a preempted request loads again)."""
        return (rid, max(self.load_gens.get(rid, 0), 0), "load")

    def execute(self, so: Any) -> Any:
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

        server, log, worker = self.server, self.server.log, self.server.worker
        meta = so.kv_connector_metadata
        for new in so.scheduled_new_reqs:
            self.seen[new.req_id] = (tuple(new.prompt_token_ids), new.sampling_params.max_tokens)
            self.features[new.req_id] = list(new.mm_features or ())
        for m in getattr(meta, "requests", ()):
            rid, op = m.request_id, m.op
            blocks = list(op.flat_block_ids)
            if m.direction == "RETRIEVE":
                self.load_blocks[rid] = blocks
                self.load_range[rid] = (op.start, op.end)
                self.load_gens[rid] = self.load_gens.get(rid, -1) + 1
                sent = self.load_op(rid)
                log.record("dispatch", op=sent, start=op.start, kv_end=op.end,
                           blocks=blocks)  # fmt: skip
            else:
                gen = self.saves.get(rid, 0)
                self.saves[rid] = gen + 1
                sent = (rid, gen, "save")
                log.record("save", op=sent, start=op.start, end=op.end)
            self._sent(sent, m.direction.lower(), op)
        worker.bind_connector_metadata(meta)
        worker.start_load_kv(None)
        delay = server.faults.forward_delay(self.forwards)
        num = sum(so.num_scheduled_tokens.values())
        log.record("forward_start", index=self.forwards, tokens=num, duration=delay)
        if delay:
            time.sleep(delay)
        self._encode(so)
        req_ids, sampled = self._forward(so)
        log.record("forward_end", index=self.forwards)
        self.forwards += 1
        worker.wait_for_save()
        sending, recving = worker.get_finished(set(so.finished_req_ids))
        bad = set(worker.get_block_ids_with_load_errors() or ())
        worker.clear_connector_metadata()
        for rid in sorted(recving or ()):
            ok = not (bad & set(self.load_blocks.get(rid, ())))
            log.record("retrieve_terminal", op=self.load_op(rid), ok=ok,
                       error=None if ok else "lmcache reported the load's blocks")  # fmt: skip
            if ok and rid in self.load_range and rid in self.kf:
                start, end = self.load_range[rid]
                blocks = self.load_blocks[rid]
                pages = [
                    self.server.pages.read(b)
                    for b in blocks[start // BLOCK_SIZE : end // BLOCK_SIZE]
                ]
                from kvfault.reference.stack.worker import page_digest

                log.record("copy_complete", op=self.load_op(rid), digest=page_digest(
                    [0 if p is None else p for p in pages]))  # fmt: skip
            log.record("finished_reported", op=self.load_op(rid),
                       outcome="finished" if ok else "failed")  # fmt: skip
        for rid in sorted(sending or ()):
            for gen in range(self.saves.get(rid, 0)):
                log.record("finished_reported", op=(rid, gen, "save"), outcome="finished")
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=sampled,
            kv_connector_output=KVConnectorOutput(
                finished_sending=set(sending or ()) or None,
                finished_recving=set(recving or ()) or None,
                invalid_block_ids=bad,
            ),
        )

    def _sent(self, sent: tuple[str, int, str], what: str, op: Any) -> None:
        """What a retrieve or store sends lmcache's server: the keys of its first and
        last whole chunk, of the token ids in the operation (``sent``)."""
        keys = self.server.keys.of(list(op.token_ids)[: op.end])
        if keys:
            self.server.log.record("sent", op=sent, what=what, end=len(keys) * CHUNK_SIZE,
                                   first=keys[0], last=keys[-1])  # fmt: skip

    def _encode(self, so: Any) -> None:
        """``GPUModelRunner``'s encoder step: free what the scheduler freed, then encode
        each scheduled picture into the cache by its identifier. The encoder's output is
        the picture's bytes (what the fake model's pages derive from)."""
        for ident in so.free_encoder_mm_hashes:
            self.encoder_cache.pop(ident, None)
        for rid, indices in so.scheduled_encoder_inputs.items():
            for i in indices:
                feature = self.features[rid][i]
                if feature.data is None:  # vLLM's runner skips it too
                    continue
                pixels = feature.data["pixel_values"].data
                self.encoder_cache[feature.identifier] = pixels.numpy().tobytes()

    def _computed(self, rid: str, start: int, n: int) -> Any:
        """The request the fake model computes ``[start, start + n)`` of: the ids and
        pictures vLLM handed the runner, each picture in the range taken from the encoder
        cache by its identifier (``_gather_mm_embeddings``; a miss raises, as there). The
        model's pages derive from the pictures from the first block on, so the forward
        that computes it must hold every picture of the prompt."""
        from vllm.multimodal.utils import get_mm_features_in_window

        from kvfault.reference.rules.keys import media_cache_seed
        from kvfault.reference.types import Request

        ids, max_tokens = self.seen[rid]
        features = self.features[rid]
        lo, hi = get_mm_features_in_window(features, start=start, end=start + n)
        pictures = []
        for f in features[lo:hi]:
            if f.identifier not in self.encoder_cache:
                raise RuntimeError(f"Encoder cache miss for {f.identifier}.")
            pictures.append(self.encoder_cache[f.identifier])
        if start < BLOCK_SIZE and len(pictures) != len(features):
            raise RuntimeError(f"{rid}: the first block's forward lacks a picture")
        seed = media_cache_seed(pictures)
        return Request(rid, ids, seed, max_output_tokens=max_tokens)

    def _forward(self, so: Any) -> tuple[list[str], list[list[int]]]:
        """Compute each scheduled prompt range into its blocks; sample a token for each
        request whose prompt is complete (one per step, from the output the pages give)."""
        sched = self.server.scheduler
        req_ids: list[str] = []
        sampled: list[list[int]] = []
        for rid, n in so.num_scheduled_tokens.items():
            req = sched.requests[rid]
            blocks = list(sched.kv_cache_manager.get_block_ids(rid)[0])
            # ``schedule`` has already advanced it past this step's tokens.
            start = req.num_computed_tokens - n
            kf = self._computed(rid, start, n)
            end = min(start + n, kf.prompt_len)
            if end > start and start < kf.prompt_len:
                self.model.compute(self.server.pages, kf, blocks, start, end)
            req_ids.append(rid)
            if start + n < kf.prompt_len:
                sampled.append([])  # a middle chunk of the prompt samples nothing
                continue
            if rid not in self.outputs or start < kf.prompt_len:
                self.outputs[rid] = self.model.output(self.server.pages, kf, blocks)
            k = len(self.tokens.get(rid, ()))
            out = self.outputs[rid]
            sampled.append([out[k] if k < len(out) else 0])
        return req_ids, sampled


def _first_hash(request: Any) -> str | None:
    """vLLM's hash of the request's first block (its ``NONE_HASH`` follows the
    process's ``PYTHONHASHSEED``): evidence of which hash seed a lookup ran under."""
    hashes = getattr(request, "block_hashes", None)
    return bytes(hashes[0]).hex() if hashes else None


class ChunkKeys:
    """The chunk keys lmcache's MP server files token ids under: its own
    ``TokenHasher`` (blake3, the server's default) over whole chunks, as hex."""

    def __init__(self) -> None:
        from lmcache.v1.multiprocess.token_hasher import TokenHasher

        self._hasher = TokenHasher(CHUNK_SIZE, "blake3")

    def of(self, token_ids: list[int]) -> list[str]:
        """The keys of ``token_ids``' whole chunks (a partial last chunk has none)."""
        whole = len(token_ids) - len(token_ids) % CHUNK_SIZE
        if not whole:
            return []
        return [bytes(h).hex() for h in self._hasher.compute_chunk_hashes(token_ids[:whole])]


def vllm_request(kf: Any, hasher: Any, model_id: str = "") -> Any:
    """vLLM's ``Request`` for kvfault's: the same ids and output length, and for each
    picture the ``MultiModalFeatureSpec`` vLLM's input processor makes (its identifier
    is vLLM's ``MultiModalHasher`` of the model and the picture; its placeholder the
    picture's run of placeholder ids; its data the picture's bytes)."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    params = SamplingParams(max_tokens=kf.max_output_tokens, ignore_eos=True)
    features = _features(kf, model_id) if kf.media else None
    return Request(kf.req_id, list(kf.prompt_token_ids), params, None,
                   mm_features=features, block_hasher=hasher)  # fmt: skip


def _features(kf: Any, model_id: str) -> list[Any]:
    import torch
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.inputs import (
        MultiModalFeatureSpec,
        MultiModalFieldElem,
        MultiModalKwargsItem,
        MultiModalSharedField,
        PlaceholderRange,
    )

    spans = placeholders(kf.prompt_token_ids)
    if len(spans) != len(kf.media):
        raise ValueError(f"{kf.req_id}: {len(kf.media)} pictures, {len(spans)} placeholders")
    features = []
    for picture, (offset, length) in zip(kf.media, spans, strict=True):
        ident = MultiModalHasher.hash_kwargs("blake3", model_id=model_id, image=picture)
        pixels = torch.frombuffer(bytearray(picture), dtype=torch.uint8)
        elem = MultiModalFieldElem(data=pixels, field=MultiModalSharedField(batch_size=1))
        features.append(
            MultiModalFeatureSpec(
                data=MultiModalKwargsItem({"pixel_values": elem}),
                modality="image",
                identifier=ident,
                mm_position=PlaceholderRange(offset=offset, length=length),
                mm_hash=ident,
            )
        )
    return features


def block_hasher() -> Any:
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    init_none_hash(sha256)
    return get_request_block_hasher(BLOCK_SIZE, sha256)


def dump(path: str, payload: dict[str, Any]) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(payload, f)
    os.replace(tmp, path)
