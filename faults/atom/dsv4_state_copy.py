"""CPU twin of ATOM's paged state-checkpoint copy kernel (``launch_copy_descriptor``,
``atom/model_ops/attentions/paged_state_copy.py``), and the state moves a DSV4 worker
runs before a batch's forward.

With its HBM prefix cache on, ATOM's block manager keeps a DeepSeek-V4 request's state
(its SLOT) at checkpoint rungs as images in PAGE units of the KV pool, and hands each
batch the moves to make before its forward (``ScheduledBatch.state_maintenance_ops``:
slot relocations, checkpoint stores, checkpoint restores). ATOM's attention metadata
builder runs them first thing in ``build`` (``backends.py:529-537``): the relocations
with torch's ``_foreach_copy_`` (runs on a CPU as it is) and the checkpoint copies
through ``execute_paged_state_copies``, which writes a descriptor of ``(source
address, destination address, bytes)`` rows and launches a Triton kernel that copies
each row's bytes. Only that launch is replaced: the twin copies each row's bytes whole
through a byte view of the host memory at its addresses (the tier's "device" memory
is host memory), after ATOM's own checks of the descriptor's shape.
"""

from __future__ import annotations

from typing import Any


def copy_descriptor(descriptor: Any, plan: Any) -> None:
    """Copy every span ``descriptor`` names (rows of source, destination, length), as
    ATOM's ``launch_copy_descriptor`` does; refuses what it refuses."""
    import torch

    from kvfault.faults.atom.dsv4_staging import _host_bytes

    rows = int(descriptor.shape[0])
    if rows == 0:
        return
    if descriptor.dtype != torch.int64 or descriptor.ndim != 2:
        raise ValueError("a copy descriptor must be a 2-D int64 tensor")
    if descriptor.shape[1] != 3 or not descriptor.is_contiguous():
        raise ValueError("a copy descriptor must be contiguous with 3 columns")
    if rows % plan.num_spans:
        raise ValueError(f"descriptor of {rows} rows is not a whole number of copies")
    for src, dst, nbytes in descriptor.tolist():
        if nbytes > 0:
            _host_bytes(dst, nbytes).copy_(_host_bytes(src, nbytes))


def run_state_ops(builder: Any, ops: Any) -> None:
    """Run a batch's state moves on ``builder`` (ATOM's DSV4 metadata builder) as its
    ``build`` does before the forward: relocations, then checkpoint stores and
    restores."""
    if ops is None:
        return
    if ops.relocations:
        builder.relocate_state_slots(ops.relocations)
    if ops.checkpoint_stores or ops.checkpoint_restores:
        builder.execute_paged_state_copies(ops.checkpoint_stores, ops.checkpoint_restores)
