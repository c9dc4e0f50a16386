"""The vllm tier's pictures: the requests it hands vLLM (``MultiModalFeatureSpec``s
built as vLLM's input processor builds them) and what its fake runner takes of them
(docs/vllm/tier.md, "What is faked")."""

from __future__ import annotations

import types

import pytest

from kvfault.faults.vllm.spec import (
    PICTURE_AT,
    PICTURE_TOKEN,
    PICTURE_TOKENS,
    picture_request,
    placeholders,
)
from kvfault.reference.rules.keys import media_cache_seed

IDS = tuple(range(100, 104)) + (PICTURE_TOKEN,) * PICTURE_TOKENS + tuple(range(200, 280))


def test_placeholders_are_the_runs_of_the_picture_token() -> None:
    assert placeholders(IDS) == [(PICTURE_AT, PICTURE_TOKENS)]
    two = (1, PICTURE_TOKEN, PICTURE_TOKEN, 2, PICTURE_TOKEN, 3)
    assert placeholders(two) == [(1, 2), (4, 1)]
    assert placeholders((1, 2, 3)) == []


def _request(name: str, picture: bytes):
    from kvfault.faults.vllm.engine import block_hasher, vllm_request

    return vllm_request(picture_request(name, IDS, picture), block_hasher(), "model")


def test_a_picture_reaches_vllm_as_its_feature_and_keys_vllms_blocks() -> None:
    x, y, x_again = _request("x", b"x" * 64), _request("y", b"y" * 64), _request("x2", b"x" * 64)
    fx, fy = x.mm_features[0], y.mm_features[0]
    assert (fx.mm_position.offset, fx.mm_position.length) == (PICTURE_AT, PICTURE_TOKENS)
    assert fx.identifier != fy.identifier and fx.identifier == x_again.mm_features[0].identifier
    assert x.has_encoder_inputs
    # vLLM's own prefix hashing tells the two pictures apart in every block.
    assert all(a != b for a, b in zip(x.block_hashes, y.block_hashes, strict=True))
    assert x.block_hashes == x_again.block_hashes
    with pytest.raises(ValueError, match="2 pictures, 1 placeholders"):
        from kvfault.faults.vllm.engine import block_hasher, vllm_request
        from kvfault.reference.types import Request

        vllm_request(Request("z", IDS, 1, (b"a", b"b")), block_hasher(), "model")


def _runner_with(request):
    from kvfault.faults.vllm.engine import FakeRunner

    runner = FakeRunner(types.SimpleNamespace())
    new = types.SimpleNamespace(
        req_id=request.request_id, prompt_token_ids=list(IDS),
        mm_features=request.mm_features, sampling_params=request.sampling_params,
    )  # fmt: skip
    runner.seen[new.req_id] = (tuple(new.prompt_token_ids), new.sampling_params.max_tokens)
    runner.features[new.req_id] = list(new.mm_features)
    return runner


def test_the_fake_runner_takes_each_picture_from_the_encoder_cache_by_identifier() -> None:
    picture = b"p" * 64
    req = _request("p", picture)
    runner = _runner_with(req)
    # Nothing encoded yet: the first block's forward misses, as vLLM's gather would.
    with pytest.raises(RuntimeError, match="Encoder cache miss"):
        runner._computed("p", 0, len(IDS))
    # A forward past the picture needs no encoder output (its KV is in the blocks).
    assert runner._computed("p", 64, len(IDS) - 64).prompt_token_ids == IDS
    so = types.SimpleNamespace(free_encoder_mm_hashes=[], scheduled_encoder_inputs={"p": [0]})
    runner._encode(so)
    assert runner._computed("p", 0, len(IDS)).cache_seed == media_cache_seed((picture,))
    # The scheduler frees it: a later first-block forward misses again.
    ident = req.mm_features[0].identifier
    runner._encode(
        types.SimpleNamespace(free_encoder_mm_hashes=[ident], scheduled_encoder_inputs={})
    )
    with pytest.raises(RuntimeError, match="Encoder cache miss"):
        runner._computed("p", 0, len(IDS))


def test_a_first_block_forward_without_every_picture_is_refused() -> None:
    # The fake model's pages derive from every picture from the first block on; a
    # forward of the first block that vLLM scheduled without a later picture (chunked
    # prefill) cannot be computed faithfully, so it raises instead of guessing.
    from kvfault.faults.vllm.engine import FakeRunner, block_hasher, vllm_request
    from kvfault.reference.types import Request

    ids = IDS + (PICTURE_TOKEN,) * 8 + tuple(range(300, 320))
    req = vllm_request(Request("two", ids, 1, (b"a" * 8, b"b" * 8)), block_hasher(), "model")
    runner = FakeRunner(types.SimpleNamespace())
    runner.seen["two"] = (ids, 4)
    runner.features["two"] = list(req.mm_features)
    runner._encode(
        types.SimpleNamespace(free_encoder_mm_hashes=[], scheduled_encoder_inputs={"two": [0, 1]})
    )
    with pytest.raises(RuntimeError, match="the first block's forward lacks a picture"):
        runner._computed("two", 0, 64)  # the second picture starts at 124
    assert runner._computed("two", 0, len(ids)).cache_seed == media_cache_seed((b"a" * 8, b"b" * 8))
