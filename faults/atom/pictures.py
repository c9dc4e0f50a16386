"""Pictures in the ``atom`` tier: a request's image as ATOM's multimodal path carries it,
and the fake vision side of ATOM's model runner.

ATOM's OpenAI server turns an image into a run of placeholder ids in the prompt and a
``multimodal_data`` of ``pixel_values`` and ``image_grid_thw`` on the ``Sequence``. Its
scheduler hands a request's ``multimodal_data`` to the first batch that schedules it and
clears it there (``ScheduledBatch``); its model runner, on a prefill batch whose
``multimodal_data`` is not empty, encodes every image of the batch and lets the model
merge the embeddings into the batch's token embeddings by placeholder mask
(``ModelRunner.run_model``; Kimi-K3's ``merge_multimodal_embeddings`` raises when the
placeholders in the batch and the embeddings differ in number).

The tier keeps ATOM's side of that real: the ``Sequence`` carries the picture as
``multimodal_data``, the scheduler decides which batch gets it, and the merge is ATOM's
own (``runner_rules.model_merge``). Faked are the encoder (an embedding per
placeholder, a digest of the image's pixels and its index) and the model: a position's
"token" in the fake model's page chain is its merged embedding, so a picture changes
the pages of its placeholders and every page after them (as attention would), and no
page before them.

The cold side (``cold_content``) is plain Python: the campaign process judges with it.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

from kvfault.reference.errors import RebuiltWhenUnpickled

# The placeholder id every token of a picture carries (as a processor expands an
# image's ``<|media_pad|>``), outside the ids ``AtomRun.prompt`` draws (3 to 29999).
PICTURE_TOKEN = 31999
# Bytes of one patch row of ``pixel_values``; Kimi-K3 merges 2x2 patches into one
# embedding, so an image of n placeholders has 4n patch rows and grid (1, 2, 2n).
_PATCH_BYTES = 8


def placeholders(prompt: tuple[int, ...]) -> list[int]:
    """The positions of the prompt's placeholder ids, in order."""
    return [i for i, t in enumerate(prompt) if t == PICTURE_TOKEN]


def pixels(picture: bytes, n: int) -> bytes:
    """The image's ``pixel_values`` bytes for ``n`` placeholders: the picture's bytes
    stretched over its 4n patch rows."""
    size = 4 * n * _PATCH_BYTES
    if not picture:
        raise ValueError("a picture has bytes")
    return (picture * (size // len(picture) + 1))[:size]


def embeddings(pixel_bytes: bytes) -> list[int]:
    """The fake encoder: one embedding per 2x2 patches of an image's pixels, a 62-bit
    digest of the pixels and its index (never a prompt id: those are below 2**15)."""
    n = len(pixel_bytes) // (4 * _PATCH_BYTES)
    digest = hashlib.blake2b(pixel_bytes, digest_size=16).digest()
    return [
        (1 << 62)
        | int.from_bytes(
            hashlib.blake2b(digest + j.to_bytes(4, "little"), digest_size=8).digest(), "little"
        )
        >> 2
        for j in range(n)
    ]


def cold_content(prompt: tuple[int, ...], picture: bytes) -> tuple[int, ...]:
    """What a cold run computes the prompt's KV from: its ids, each placeholder replaced
    by the picture's embedding in order (the whole prompt in one forward, its picture
    merged). A prompt without a picture is its ids."""
    if not picture:
        return prompt
    at = placeholders(prompt)
    out = list(prompt)
    for i, e in zip(at, embeddings(pixels(picture, len(at))), strict=True):
        out[i] = e
    return tuple(out)


def multimodal_data(prompt: tuple[int, ...], picture: bytes) -> dict[str, Any]:
    """The ``multimodal_data`` ATOM's server puts on a request's ``Sequence`` for one
    image: its ``pixel_values`` (patch rows) and ``image_grid_thw``. Server processes
    only (imports torch)."""
    import torch

    n = len(placeholders(prompt))
    rows = torch.frombuffer(bytearray(pixels(picture, n)), dtype=torch.uint8)
    return {
        "pixel_values": rows.view(4 * n, _PATCH_BYTES).clone(),
        "image_grid_thw": torch.tensor([[1, 2, 2 * n]]),
    }


class MergeRaised(RebuiltWhenUnpickled, Exception):
    """ATOM's merge raised an ``error`` (the exception's name) with ``message`` (its
    first line): the model runner's forward fails there. Only ATOM's own call is
    wrapped, so a fault of the tier's code is never taken for ATOM's."""

    def __init__(self, error: str, message: str):
        super().__init__(f"{error}: {message}")
        self.error, self.message = error, message

    @classmethod
    def of(cls, raised: BaseException) -> MergeRaised:
        """The one ATOM's merge raised, named and cut to its first line."""
        text = str(raised).splitlines()
        return cls(type(raised).__name__, text[0] if text else "")


class RunnerMerge:
    """The multimodal step of ATOM's ``ModelRunner`` for one prefill batch, with ATOM's
    own merge: ``embed(batch, inputs)`` takes the batch's ``multimodal_data`` (what
    ATOM's scheduler gave this batch) and each scheduled sequence's input ids (the
    tokens the batch computes, in batch order) and returns each sequence's ids with the
    merged embeddings in place of the placeholders; with no picture in the batch, the
    ids unchanged. ``MergeRaised`` when ATOM's merge raises. Server processes only."""

    def __init__(self, merge: Callable[..., Any]):
        self._merge = merge

    def embed(self, batch: Any, inputs: list[list[int]]) -> list[list[int]]:
        mm = getattr(batch, "multimodal_data", None)
        if not mm:
            return inputs
        import torch

        values = list(mm.values())
        pixel_values = torch.cat([m["pixel_values"] for m in values], dim=0)
        grid = torch.cat([m["image_grid_thw"] for m in values], dim=0)
        vision: list[int] = []
        row = 0
        for t, h, w in grid.tolist():
            n = int(t * h * w)
            vision += embeddings(pixel_values[row : row + n].contiguous().numpy().tobytes())
            row += n
        flat = [t for ids in inputs for t in ids]
        input_ids = torch.tensor(flat, dtype=torch.int64)
        text = input_ids.view(-1, 1).clone()  # a token's "embedding" is its id
        vision_embeds = torch.tensor(vision, dtype=torch.int64).view(-1, 1)
        try:
            merged = self._merge(input_ids, text, vision_embeds)
        except Exception as e:  # noqa: BLE001  whatever ATOM's merge raises
            raise MergeRaised.of(e) from e
        out, values_flat, at = [], merged.view(-1).tolist(), 0
        for ids in inputs:
            out.append(values_flat[at : at + len(ids)])
            at += len(ids)
        return out
