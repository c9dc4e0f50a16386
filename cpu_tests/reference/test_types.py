"""The stack's plain data: geometry validation at its boundaries and its grid
arithmetic, request validation, operation ids."""

from __future__ import annotations

import pickle

import pytest

from kvfault.reference.types import Geometry, OperationId, OpKind, Request


def test_the_default_geometry_is_valid():
    geo = Geometry()
    assert (geo.block_size, geo.chunk_size, geo.prefill_budget) == (16, 256, 2048)
    assert geo.state_checkpoint_interval == 1024


def test_the_smallest_valid_geometry_is_one_token_everywhere():
    geo = Geometry(1, 1, 1, 1)
    assert geo.floor_chunk(7) == 7 and geo.ceil_chunk(7) == 7


@pytest.mark.parametrize("block", [0, -16])
def test_block_size_must_be_positive(block):
    with pytest.raises(ValueError, match=rf"block_size must be positive, got {block}"):
        Geometry(block, 256, 2048, 1024)


@pytest.mark.parametrize("chunk", [0, -256, 24, 8])
def test_chunk_size_must_be_a_positive_multiple_of_the_block(chunk):
    with pytest.raises(ValueError, match=rf"chunk_size \({chunk}\) must be a positive multiple"):
        Geometry(16, chunk, 2048, 1024)


def test_a_chunk_of_exactly_one_block_is_valid():
    assert Geometry(16, 16, 16, 16).chunk_size == 16


def test_the_prefill_budget_must_hold_at_least_one_block():
    assert Geometry(16, 256, 16, 1024).prefill_budget == 16
    with pytest.raises(ValueError, match=r"prefill_budget \(15\) must be at least one block"):
        Geometry(16, 256, 15, 1024)


@pytest.mark.parametrize("interval", [0, -256, 300, 128])
def test_the_state_interval_must_be_a_positive_multiple_of_the_chunk(interval):
    with pytest.raises(ValueError, match=rf"state_checkpoint_interval \({interval}\) must be"):
        Geometry(16, 256, 2048, interval)


def test_a_state_interval_of_exactly_one_chunk_is_valid():
    assert Geometry(16, 256, 2048, 256).state_checkpoint_interval == 256


@pytest.mark.parametrize(
    "tokens, block, floor_chunk, ceil_chunk",
    [
        (0, 0, 0, 0),
        (1, 0, 0, 256),
        (16, 16, 0, 256),
        (255, 240, 0, 256),
        (256, 256, 256, 256),
        (257, 256, 256, 512),
        (600, 592, 512, 768),
    ],
)
def test_grid_rounding(tokens, block, floor_chunk, ceil_chunk):
    geo = Geometry(16, 256, 2048, 1024)
    assert geo.floor_block(tokens) == block
    assert geo.floor_chunk(tokens) == floor_chunk
    assert geo.ceil_chunk(tokens) == ceil_chunk


def test_a_request_needs_a_prompt_and_at_least_one_output_token():
    assert Request("r", (1, 2, 3), max_output_tokens=1).prompt_len == 3
    with pytest.raises(ValueError, match="request 'r' has an empty prompt"):
        Request("r", ())
    with pytest.raises(ValueError, match="request 'r': max_output_tokens must be >= 1"):
        Request("r", (1,), max_output_tokens=0)


def test_an_operation_id_names_its_kind_request_and_generation():
    load = OperationId("req-7", 3)
    save = OperationId("req-7", 3, OpKind.SAVE)
    assert str(load) == "load:req-7#3" and str(save) == "save:req-7#3"
    assert load != save and load == OperationId("req-7", 3, OpKind.LOAD)
    assert hash(load) == hash(OperationId("req-7", 3))
    assert len({load, save, OperationId("req-7", 4)}) == 3


def test_an_operation_id_survives_pickling_with_its_hash_and_text():
    op = OperationId("req-7", 3, OpKind.SAVE)
    back = pickle.loads(pickle.dumps(op))
    assert back == op and hash(back) == hash(op) and str(back) == str(op)
    assert back.kind is OpKind.SAVE
