"""Anchors: where a hybrid's prefill steps end so a state image can be captured.

A state image exists only at the end of a forward step, so the scheduler cuts prefill
steps at anchors. The tier keeps images only on its state grid: every block boundary
in-process, only the chunk grid under the multiprocess (MP) server (fix 3 of the seed).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvfault.reference.types import Geometry, StateGrid


def grid_step(geometry: Geometry, state_grid: StateGrid) -> int:
    return geometry.chunk_size if state_grid == "chunk" else geometry.block_size


@dataclass(frozen=True)
class AnchorPolicy:
    """Mid-prefill anchors every ``state_checkpoint_interval`` tokens and a prompt-end
    anchor at the last block boundary before the prompt end, but not past the prompt's
    last full chunk (the tier keeps KV in full chunks only, and a hit claims no more
    than its KV: an image further on is never used); under MP the prompt-end anchor is
    floored onto the chunk grid while the grid still lies past the resume point, and
    off-grid anchors are not cut for."""

    def plan(
        self, prompt_len: int, resume: int, geometry: Geometry, state_grid: StateGrid
    ) -> list[int]:
        """The anchors past ``resume`` that the scheduler cuts prefill steps at."""
        grid = grid_step(geometry, state_grid)
        end_anchor = min(geometry.floor_block(prompt_len - 1), geometry.floor_chunk(prompt_len))
        on_grid = end_anchor - end_anchor % grid
        if on_grid > resume:
            end_anchor = on_grid
        interval = geometry.state_checkpoint_interval
        anchors = set(range(interval, end_anchor, interval)) | {end_anchor}
        return sorted(a for a in anchors if a > resume and a % grid == 0)

    def cut(self, start: int, end: int, anchors: list[int]) -> int:
        """End of a prefill step ``[start, end)``: the first anchor it crosses."""
        for anchor in anchors:
            if start < anchor < end:
                return anchor
        return end
