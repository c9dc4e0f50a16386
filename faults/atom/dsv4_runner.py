"""ATOM's DSV4 KV pools and their transfer regions, built by ATOM's own code on a CPU.

ATOM's model runner asks its DSV4 attention metadata builder
(``DeepseekV4AttentionMetadataBuilder``) to price a PAGE block and a request's SLOT
(``sub_pool_specs``), sizes the pools from its memory budget (``plan_pools``), records
the state-checkpoint geometry (``StateRuntime``), has the builder allocate the pools
(``allocate_kv_cache_tensors``, ``allocate_per_req_cache``) and hands the connector what
``get_kv_transfer_tensors`` describes. ``Dsv4Pools`` runs those same calls of ATOM's, in
that order, with a runner stand-in holding the attributes they read, and a budget of
exactly ``num_blocks`` blocks and ``num_slots`` slots instead of the GPU's free memory.
It skips only ``warmup_per_req_cache`` (a Triton copy kernel's first launch). So the
regions the connector gets are ATOM's layout, not the tier's; the fake forward
(``dsv4_kv.Dsv4Kv``) and the state moves (``dsv4_state_copy``) reach the pools through
``builder``, as ATOM's model does, not through those regions.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class Dsv4Pools:
    """The pools of one DSV4 worker rank: ``runner`` (the stand-in, with the pool
    tensors ATOM's builder set on it), ``builder``, ``plan`` (ATOM's ``PoolPlan``),
    ``state_runtime`` and ``transfer`` (ATOM's ``KVTransferTensors``). With
    ``allocate`` off, the sizing only (what ATOM's runner sends its engine process:
    ``plan`` and ``state_runtime``), no pool and no ``transfer``."""

    def engine_config(self, config: Any) -> None:
        """Set on ``config`` what ATOM's runner ships to its engine process for the
        block manager (``model_runner.py:1799-1804``, read at ``engine_core.py:116-130``)."""
        config.num_kvcache_blocks = self.num_blocks
        config.pool_entries = dict(self.plan.entries)
        config.pool_entries_per_req = dict(self.plan.entries_per_req)

    def __init__(
        self, config: Any, *, num_blocks: int, num_slots: int, allocate: bool = True
    ) -> None:
        import atom.config
        from atom.model_engine.kv_block import STATE_SLOT_CLASS
        from atom.model_engine.page_unit_checkpoint import PagedStateCheckpointSpec
        from atom.model_engine.state_runtime import StateRuntime
        from atom.model_ops.attentions.deepseek_v4_attn import (
            DeepseekV4AttentionMetadataBuilder,
        )
        from atom.model_ops.attentions.sub_pool_spec import plan_pools

        # ATOM's builders read the process's current config (DCP and PCP sizes).
        atom.config.set_current_atom_config(config)
        block_size = DeepseekV4AttentionMetadataBuilder.block_size
        self.runner = SimpleNamespace(
            config=config,
            block_size=block_size,
            device="cpu",
            max_num_batched_tokens=config.max_num_batched_tokens,
            max_bs=config.max_num_seqs,
            forward_vars={},
            kv_cache_dtype=config.kv_cache_dtype,
            model=None,
            async_execute_stream=None,
        )
        self.builder = DeepseekV4AttentionMetadataBuilder(self.runner)
        specs = self.builder.sub_pool_specs()
        page, state = (next(s for s in specs if s.pool.value == p) for p in ("page", "state"))
        budget = num_blocks * page.entry_bytes + num_slots * state.entry_bytes
        self.plan = plan_pools(specs, budget, num_slots)
        self.runner.pool_plan = self.plan
        transfer = self.builder.state_transfer()
        spec = None
        if transfer.copies:
            slot_bytes = int(self.plan.entry_bytes[STATE_SLOT_CLASS])
            image = self.builder.checkpoint_image_bytes()
            spec = PagedStateCheckpointSpec(
                page_unit_bytes=int(self.plan.entry_bytes[self.plan.paged_class]),
                slot_bytes=slot_bytes,
                image_bytes=slot_bytes if image is None else int(image),
                layout_id=transfer.paged_layout_id,
            )
        self.state_runtime = StateRuntime(transfer=transfer, checkpoint_spec=spec)
        self.runner.state_runtime = self.state_runtime
        self.num_blocks = self.plan.paged_entries
        self.transfer: Any = None
        if allocate:
            self._allocate()

    def _allocate(self) -> None:
        self.runner.num_physical_kvcache_blocks = self.num_blocks * self.builder.block_ratio
        for name, value in self.builder.allocate_kv_cache_tensors(1, 0).items():
            setattr(self.runner, name, value)
        for name, value in self.builder.allocate_per_req_cache(self.plan.entries).items():
            setattr(self.runner, name, value)
        self.transfer = self.builder.get_kv_transfer_tensors()
        if self.transfer is None:
            raise RuntimeError("ATOM's DSV4 builder described no transfer regions")

    @property
    def num_slots(self) -> int:
        return int(self.transfer.num_slots)
