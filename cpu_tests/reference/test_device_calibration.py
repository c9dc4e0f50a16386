"""How the copy engine's ``auto`` picks a path (``kvfault.reference.device.calibration``): by
a timer, cached per device in one JSON file, robust to a bad file and to two writers.
Plain data: no torch, no device."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvfault.reference.device.calibration import (
    CACHE_FORMAT,
    CACHE_VERSION,
    SPLIT,
    SPLIT_SHARES,
    CalibrationCache,
    Calibrator,
    Choice,
    base_path,
    cache_path,
    calibrate,
    calibrate_sizes,
    device_key,
    split_path,
    split_share,
)

ROOT = Path(__file__).resolve().parents[2]
KEY = device_key("NVIDIA H100 80GB HBM3", "0000:18:00.0", "580.159.04", "2.11.0", "3.6.0")


class FakeTimer:
    """Seconds per restore by path, with the order of calls recorded."""

    def __init__(self, seconds: dict[str, float]):
        self.seconds = seconds
        self.calls: list[str] = []

    def __call__(self, path: str, blocks: int = 0) -> float:
        self.calls.append(path)
        value = self.seconds[path]
        if isinstance(value, Exception):
            raise value
        return value


@pytest.mark.parametrize("fast", ["dma", "mapped:triton", "mapped:index"])
def test_the_fake_timer_picks_the_faster_path(fast):
    timer = FakeTimer(
        {p: (1e-4 if p == fast else 3e-4) for p in ("dma", "mapped:triton", "mapped:index")}
    )
    choice = calibrate(["dma", "mapped:triton", "mapped:index"], timer, rounds=5, what="8 MiB")
    assert choice.path == fast and choice.source == "measured"
    assert choice.seconds[fast] == pytest.approx(1e-4)
    assert choice.reason.startswith(f"fastest of {fast} 100 us") and "(3.00x)" in choice.reason
    assert len(timer.calls) == 15


def test_rounds_are_interleaved_each_led_by_another_candidate():
    timer = FakeTimer({"a": 1.0, "b": 1.0, "c": 1.0})
    calibrate(["a", "b", "c"], timer, rounds=3)
    assert [timer.calls[i] for i in (0, 3, 6)] == ["a", "b", "c"]


def test_the_median_decides_not_one_outlier():
    samples = {"dma": iter([9.0, 1.0, 1.0, 1.0, 1.0]), "mapped:triton": iter([2.0] * 5)}
    choice = calibrate(["dma", "mapped:triton"], lambda p: next(samples[p]), rounds=5)
    assert choice.path == "dma"


def test_a_tie_goes_to_the_earlier_candidate():
    assert calibrate(["x", "y"], FakeTimer({"x": 1.0, "y": 1.0})).path == "x"
    assert calibrate(["y", "x"], FakeTimer({"x": 1.0, "y": 1.0})).path == "y"


def test_within_the_tie_share_the_earlier_candidate_wins_and_says_so():
    # dma listed first: 2% slower still takes it, 5% slower does not
    near = calibrate(["dma", "mapped:triton"], FakeTimer({"dma": 1.02, "mapped:triton": 1.0}))
    assert near.path == "dma"
    assert near.reason.startswith("within 3% of the fastest, listed first: dma 1020000 us")
    far = calibrate(["dma", "mapped:triton"], FakeTimer({"dma": 1.05, "mapped:triton": 1.0}))
    assert far.path == "mapped:triton" and far.reason.startswith("fastest of mapped:triton")


def test_a_path_whose_timer_fails_is_never_chosen_and_the_reason_says_why():
    timer = FakeTimer({"dma": RuntimeError("cudaError 1"), "mapped:triton": 5.0})
    choice = calibrate(["dma", "mapped:triton"], timer)
    assert choice.path == "mapped:triton"
    assert "dma failed (RuntimeError: cudaError 1)" in choice.reason
    assert timer.calls.count("dma") == 1  # not retried
    with pytest.raises(ValueError, match="no candidate path could be measured"):
        calibrate(["dma"], FakeTimer({"dma": TimeoutError("late")}))
    with pytest.raises(ValueError, match="no candidate"):
        calibrate([], FakeTimer({}))


def _measurer(timer):
    calls = []

    def measurer():
        calls.append(1)
        return timer, 8, 64, "8 KiB pages"

    measurer.calls = calls
    return measurer


def test_the_choice_is_measured_once_then_cached(tmp_path):
    cache = CalibrationCache(tmp_path / "c.json", warn=pytest.fail)
    timer = FakeTimer({"dma": 2e-3, "mapped:triton": 1e-3})
    first = Calibrator(cache).choose(KEY, 8192, ["dma", "mapped:triton"], _measurer(timer))
    assert (first.path, first.source) == ("mapped:triton", "measured")
    never = _measurer(FakeTimer({}))
    again = Calibrator(CalibrationCache(tmp_path / "c.json", warn=pytest.fail)).choose(
        KEY, 8192, ["dma", "mapped:triton"], never
    )
    assert (again.path, again.source, again.reason) == ("mapped:triton", "cached", first.reason)
    assert again.seconds == first.seconds and not never.calls
    # another page size, another device: measured anew
    other = _measurer(FakeTimer({"dma": 1e-3, "mapped:triton": 2e-3}))
    assert Calibrator(cache).choose(KEY, 262144, ["dma", "mapped:triton"], other).path == "dma"
    key2 = KEY.replace("H100 80GB HBM3", "H200")
    assert Calibrator(cache).choose(key2, 8192, ["dma", "mapped:triton"], other).path == "dma"
    assert len(other.calls) == 2
    doc = json.loads((tmp_path / "c.json").read_text())
    assert set(doc["entries"]) == {KEY, key2} and set(doc["entries"][KEY]) == {"8192", "262144"}


def test_a_cached_path_no_longer_available_is_measured_again(tmp_path):
    cache = CalibrationCache(tmp_path / "c.json", warn=pytest.fail)
    cache.put(KEY, 8192, Choice("dma", "measured", "r", {"dma": 1.0}))
    m = _measurer(FakeTimer({"mapped:triton": 1.0, "mapped:index": 2.0}))
    got = Calibrator(cache).choose(KEY, 8192, ["mapped:triton", "mapped:index"], m)
    assert (got.path, got.source) == ("mapped:triton", "measured") and m.calls


def test_one_candidate_is_taken_without_measuring(tmp_path):
    m = _measurer(FakeTimer({}))
    got = Calibrator(CalibrationCache(tmp_path / "c.json")).choose(KEY, 8192, ["dma"], m)
    assert (got.path, got.source) == ("dma", "only") and not m.calls
    assert not (tmp_path / "c.json").exists()


def test_an_injected_timer_replaces_the_engines(tmp_path):
    engine_timer = FakeTimer({"dma": 1.0, "mapped:triton": 2.0})
    fake = FakeTimer({"dma": 2.0, "mapped:triton": 1.0})
    got = Calibrator(None, timer=fake).choose(
        KEY, 8192, ["dma", "mapped:triton"], _measurer(engine_timer)
    )
    assert got.path == "mapped:triton" and not engine_timer.calls and fake.calls


BAD_FILES = {
    "not JSON": ("{ truncated", "is not JSON"),
    "not utf-8": (b"\xff\xfe\x00garbage", "cannot be read"),
    "another program's JSON": ('{"entries": {}}', f"is not a {CACHE_FORMAT} file"),
    "a list": ("[1, 2]", f"is not a {CACHE_FORMAT} file"),
    "a future version": (
        json.dumps({"format": CACHE_FORMAT, "version": CACHE_VERSION + 1, "entries": {}}),
        f"is version {CACHE_VERSION + 1}",
    ),
    "no entries table": (
        json.dumps({"format": CACHE_FORMAT, "version": CACHE_VERSION, "entries": [1]}),
        "has no entries table",
    ),
    "a malformed entry": (
        json.dumps(
            {
                "format": CACHE_FORMAT,
                "version": CACHE_VERSION,
                "entries": {KEY: {"8192": {"path": 3, "reason": "r", "seconds": {}}}},
            }
        ),
        "holds 1 malformed entry",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_corrupt_or_foreign_cache_is_ignored_with_one_line_then_rewritten(tmp_path, case, capsys):
    content, why = BAD_FILES[case]
    path = tmp_path / "gpu_calibration.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    cache = CalibrationCache(path)
    timer = FakeTimer({"dma": 2e-3, "mapped:triton": 1e-3})
    got = Calibrator(cache).choose(KEY, 8192, ["dma", "mapped:triton"], _measurer(timer))
    assert (got.path, got.source) == ("mapped:triton", "measured")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err  # one line, though the file was read twice (get, then put)
    assert err[0].startswith(f"kvfault: ignoring GPU calibration cache {path}: {why}")
    # the measured choice replaced the bad file: the next engine reads it, silently
    again = Calibrator(CalibrationCache(path)).choose(
        KEY, 8192, ["dma", "mapped:triton"], _measurer(FakeTimer({}))
    )
    assert again.source == "cached" and capsys.readouterr().err == ""


def test_a_cache_that_cannot_be_written_costs_one_line_not_the_choice(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = CalibrationCache(blocker / "sub" / "c.json")  # a directory under a file
    got = Calibrator(cache).choose(
        KEY, 8192, ["a", "b"], _measurer(FakeTimer({"a": 2.0, "b": 1.0}))
    )
    assert got.path == "b"
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("kvfault: could not save the GPU calibration")


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from kvfault.reference.device.calibration import CalibrationCache, Choice
    path, who, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    cache = CalibrationCache(path, warn=lambda line: sys.exit("warned: " + line))
    for i in range(n):
        cache.put(who, 4096 + i, Choice("dma", "measured", who * 50, {"dma": i * 1e-6}))
    """
)


def test_two_writers_at_once_leave_a_valid_file_with_both_entries(tmp_path):
    path = tmp_path / "gpu_calibration.json"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), who, "40"],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("writer-a", "writer-b")
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    doc = json.loads(path.read_text())
    assert doc["format"] == CACHE_FORMAT
    assert {k: len(v) for k, v in doc["entries"].items()} == {"writer-a": 40, "writer-b": 40}
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".gpu_calibration.")]
    assert leftovers == []


def test_the_cache_lives_in_the_users_cache_directory(tmp_path):
    assert cache_path({"KVFAULT_CACHE_DIR": str(tmp_path)}) == tmp_path / "gpu_calibration.json"
    xdg = cache_path({"XDG_CACHE_HOME": str(tmp_path)})
    assert xdg == tmp_path / "kvfault" / "gpu_calibration.json"
    assert cache_path({}) == Path.home() / ".cache" / "kvfault" / "gpu_calibration.json"


def test_the_key_names_device_bus_driver_and_software():
    for part in ("NVIDIA H100 80GB HBM3", "0000:18:00.0", "580.159.04", "2.11.0", "3.6.0"):
        assert part in KEY


def _linear(costs):
    """A timer: seconds = fixed + per_block * blocks, per path."""
    return lambda path, blocks: costs[path][0] + costs[path][1] * blocks


def test_one_path_winning_small_and_large_restores_is_taken_for_all():
    timer = _linear({"dma": (50e-6, 1e-6), "mapped:triton": (10e-6, 2e-6)})
    got = calibrate_sizes(["dma", "mapped:triton"], timer, small=8, large=8)
    assert got.large is None and got.path_for(10**6) == got.path
    same = calibrate_sizes(
        ["dma", "mapped:triton"],
        _linear({"dma": (1e-6, 1e-6), "mapped:triton": (9e-6, 2e-6)}),
        8,
        64,
    )
    assert (same.path, same.large, same.large_from) == ("dma", None, None)


def test_small_and_large_winners_split_at_the_crossing_of_their_lines():
    # dma: 100 us + 1 us a block; the gather: 20 us + 2 us a block: equal at 80 blocks
    timer = _linear({"dma": (100e-6, 1e-6), "mapped:triton": (20e-6, 2e-6)})
    got = calibrate_sizes(["dma", "mapped:triton"], timer, small=16, large=512, what="x")
    assert (got.path, got.large, got.large_from) == ("mapped:triton", "dma", 80)
    assert [got.path_for(k) for k in (1, 79, 80, 512, 10**6)] == [
        "mapped:triton",
        "mapped:triton",
        "dma",
        "dma",
        "dma",
    ]
    assert got.line().startswith("mapped:triton below 80 blocks, dma from there (measured): ")
    assert (
        "at 512 blocks: fastest of dma" in got.reason
        and "at 16: fastest of mapped:triton" in got.reason
    )


def test_a_split_survives_the_cache_and_a_bad_split_entry_is_ignored(tmp_path, capsys):
    path = tmp_path / "c.json"
    timer = _linear({"dma": (100e-6, 1e-6), "mapped:triton": (20e-6, 2e-6)})

    def measurer():
        return timer, 16, 512, "x"

    first = Calibrator(CalibrationCache(path)).choose(
        KEY, 262144, ["dma", "mapped:triton"], measurer
    )
    again = Calibrator(CalibrationCache(path)).choose(
        KEY, 262144, ["dma", "mapped:triton"], _measurer(FakeTimer({}))
    )
    assert again.source == "cached" and (again.large, again.large_from) == (first.large, 80)
    # a cached split whose large path is no longer available: measured again
    m = _measurer(FakeTimer({"mapped:triton": 1.0, "mapped:index": 2.0}))
    got = Calibrator(CalibrationCache(path)).choose(
        KEY, 262144, ["mapped:triton", "mapped:index"], m
    )
    assert got.source == "measured" and m.calls
    doc = json.loads(path.read_text())
    doc["entries"][KEY]["262144"] = {
        "path": "dma",
        "reason": "r",
        "seconds": {},
        "large": "x",
        "large_from": -3,
    }
    path.write_text(json.dumps(doc))
    assert CalibrationCache(path).get(KEY, 262144) is None
    assert "holds 1 malformed entry" in capsys.readouterr().err


# -- the split path: the copy engines and the gather at once -----------------------------


class SplitHost:
    """A fake host: each single path costs ``fixed + per_block * blocks`` seconds; a
    ``split:SHARE`` restore runs its two parts at once, so it ends with the slower part,
    and never before the link has moved the bytes (``link`` seconds a block). Records
    every (path, blocks) timed."""

    def __init__(self, dma, gather, link, others=None):
        self.costs = {"dma": dma, "mapped:triton": gather, **(others or {})}
        self.link = link
        self.calls: list[tuple[str, int]] = []

    def alone(self, path, blocks):
        fixed, per = self.costs[path]
        return fixed + per * blocks

    def __call__(self, path, blocks):
        self.calls.append((path, blocks))
        share = split_share(path)
        if share is None:
            return self.alone(path, blocks)
        k = round(share * blocks)
        parts = (self.alone("dma", k) if k else 0.0, self.alone("mapped:triton", blocks - k))
        return max(*parts, self.link * blocks)


# the slow-gather H100 (h100-8) at 8 KiB pages: 64 MiB by dma 4742 us (queueing the
# copies), by the gather 2373 us (the SMs' reads of host memory), the link 1240 us
SLOW_8K = dict(dma=(20e-6, 4742e-6 / 8192), gather=(10e-6, 2373e-6 / 8192), link=1240e-6 / 8192)
# a fast H100 (h100-7) at 8 KiB: the gather alone moves at the link's rate
FAST_8K = dict(dma=(20e-6, 7883e-6 / 8192), gather=(2e-6, 1380e-6 / 8192), link=1380e-6 / 8192)
CANDIDATES = ["dma", "mapped:triton", SPLIT]


def test_split_names():
    assert split_path(0.4) == "split:0.40" and split_share("split:0.40") == 0.4
    assert split_share("dma") is None and split_share("split:x") is None
    assert split_share("split:1.5") is None
    assert base_path("split:0.40") == SPLIT and base_path("mapped:triton") == "mapped:triton"


def test_where_neither_path_reaches_the_link_the_best_split_share_is_taken():
    host = SplitHost(**SLOW_8K)
    model = SplitHost(**SLOW_8K)
    best = min((split_path(x) for x in SPLIT_SHARES), key=lambda p: model(p, 8192))
    assert best == "split:0.20"  # 1909 us; 0.4: 1917 us (the halves end together at 0.33)
    got = calibrate_sizes(CANDIDATES, host, small=1024, large=8192, what="8192 B pages")
    assert got.path == best and got.large is None
    assert got.path_for(10**6) == best
    # every share was timed on the large restores, the best one on the small ones too,
    # all after the single paths
    large_splits = {p for p, k in host.calls if k == 8192 and p.startswith(SPLIT)}
    assert large_splits == {split_path(x) for x in SPLIT_SHARES}
    assert {p for p, k in host.calls if k == 1024 and p.startswith(SPLIT)} == {best}
    first_split = next(i for i, c in enumerate(host.calls) if c[0].startswith(SPLIT))
    assert {c[0] for c in host.calls[:first_split]} == {"dma", "mapped:triton"}
    assert "best split split:0.20: the copy engines take 20% of the blocks" in got.reason
    assert got.seconds[best] < got.seconds["mapped:triton"] * 0.9


def test_the_share_is_found_by_measurement_not_by_the_parts_alone():
    """The halves slow each other down (as on a lent H100): the best share is where the
    timer says, not where the parts' own times would meet."""
    host = SplitHost(**SLOW_8K)

    def shared(path, blocks):
        share = split_share(path)
        if share is None:
            return host(path, blocks)
        # the parts alone would meet near 0.33; here 0.8 is the only share that pays
        return host.alone("mapped:triton", blocks) * (0.7 if share == 0.8 else 1.2)

    got = calibrate_sizes(CANDIDATES, shared, small=1024, large=8192)
    assert got.path == "split:0.80"


def test_where_one_path_reaches_the_link_the_split_is_never_taken():
    got = calibrate_sizes(CANDIDATES, SplitHost(**FAST_8K), small=1024, large=8192)
    assert (got.path, got.large) == ("mapped:triton", None)
    # 2% faster than the gather alone is a tie: the single path listed first keeps it
    host = SplitHost(**FAST_8K)
    near = calibrate_sizes(
        CANDIDATES,
        lambda p, k: host.alone("mapped:triton", k) * 0.98 if p.startswith(SPLIT) else host(p, k),
        small=1024,
        large=8192,
    )
    assert near.path == "mapped:triton" and "within 3% of the fastest" in near.reason


def test_a_split_that_fails_is_not_taken_and_without_both_parts_none_is_tried():
    host = SplitHost(**SLOW_8K)

    def failing(path, blocks):
        if path.startswith(SPLIT):
            raise RuntimeError("cudaError 1")
        return host(path, blocks)

    got = calibrate_sizes(CANDIDATES, failing, small=1024, large=8192)
    assert got.path == "mapped:triton" and "failed (RuntimeError: cudaError 1)" in got.reason
    only = calibrate_sizes(["mapped:triton", "mapped:index", SPLIT], lambda p, k: 1.0, 8, 64)
    assert only.path == "mapped:triton" and "no split" in only.reason


def test_a_split_winning_large_restores_only_starts_at_the_crossing():
    # the gather's fixed cost is low and dma's high: small restores go by the gather
    # alone, large ones split
    host = SplitHost(dma=(400e-6, 0.4e-6), gather=(5e-6, 0.4e-6), link=0.1e-6)
    got = calibrate_sizes(CANDIDATES, host, small=256, large=2048)
    assert got.path == "mapped:triton" and got.large is not None
    assert got.large.startswith(SPLIT) and 256 < got.large_from <= 2048
    assert got.path_for(256) == "mapped:triton" and got.path_for(2048) == got.large


def test_a_cached_split_is_reused_only_where_the_engine_can_split(tmp_path):
    path = tmp_path / "c.json"
    host = SplitHost(**SLOW_8K)
    first = Calibrator(CalibrationCache(path)).choose(
        KEY, 8192, CANDIDATES, lambda: (host, 1024, 8192, "x")
    )
    assert first.path == "split:0.20"
    again = Calibrator(CalibrationCache(path)).choose(
        KEY, 8192, CANDIDATES, _measurer(FakeTimer({}))
    )
    assert (again.path, again.source) == ("split:0.20", "cached")
    # an engine that cannot split (no second stream here): measured again
    m = _measurer(FakeTimer({"dma": 2.0, "mapped:triton": 1.0}))
    got = Calibrator(CalibrationCache(path)).choose(KEY, 8192, ["dma", "mapped:triton"], m)
    assert got.source == "measured" and got.path == "mapped:triton" and m.calls


def test_the_fastest_split_share_is_taken_and_the_sizes_still_cross():
    """At the large restores 0.9 is the fastest share (0.8 within 3% of it); the small
    restores go by dma. The crossing needs the split's time at both sizes: the share
    timed on the small restores is the one taken on the large ones."""

    def timer(path, blocks):
        share = split_share(path)
        if path == "dma":
            return 10e-6 + 1.0e-6 * blocks
        if share is None:
            return 10e-6 + 2.0e-6 * blocks
        per = {0.8: 0.71e-6, 0.9: 0.70e-6}.get(share, 1.5e-6)
        return 150e-6 + per * blocks

    got = calibrate_sizes(CANDIDATES, timer, small=128, large=1024)
    assert (got.path, got.large) == ("dma", "split:0.90")
    assert 128 < got.large_from <= 1024
    assert "split:0.90 taken: more than 5% faster than dma" in got.reason


def test_a_split_must_beat_the_single_path_by_the_margin():
    for factor, taken in ((0.94, True), (0.96, False)):
        host = SplitHost(**FAST_8K)

        def timer(path, blocks, factor=factor, host=host):
            if split_share(path) is None:
                return host(path, blocks)
            return host.alone("mapped:triton", blocks) * factor

        got = calibrate_sizes(CANDIDATES, timer, small=1024, large=8192)
        assert got.path.startswith(SPLIT) is taken, (factor, got.reason)
        if not taken:
            assert "mapped:triton kept: no split more than 5% faster" in got.reason
