"""Issue 24, item 6: what a reviewer reads: list headers, progress off a terminal, and an
install that leaves the checkout clean."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvfault.faults import cli
from kvfault.faults.report.progress import Lines, show

ROOT = Path(__file__).resolve().parents[2]


def test_several_lists_get_headers_one_list_none(capsys):
    assert cli.main(["list", "--faults", "--regressions"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "faults:"
    assert "regressions:" in out
    body = [ln for ln in out if ln not in ("faults:", "regressions:")]
    assert all(ln.startswith("  ") for ln in body)
    assert cli.main(["list", "--faults"]) == 0
    alone = capsys.readouterr().out.splitlines()
    assert "faults:" not in alone and not alone[0].startswith(" ")


def test_progress_off_a_terminal_is_a_dozen_lines_not_one_per_case(capsys):
    lines = Lines(every_s=1e9)
    for i in range(77):
        show(lines, i, 76 if i < 77 else 76, f"case{i}")
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "kvfault: 0/76 cases done; running case0"
    assert err[-1] == "kvfault: 76/76 cases done; done"
    assert len(err) <= 12, err


def test_progress_off_a_terminal_also_speaks_after_a_while(capsys):
    lines = Lines(every_s=30.0)
    now = [0.0]
    lines.clock = lambda: now[0]
    show(lines, 0, 1000, "a")
    show(lines, 1, 1000, "b")  # too soon, too few
    now[0] = 31.0
    show(lines, 2, 1000, "c")
    err = capsys.readouterr().err.splitlines()
    assert [ln.rsplit(" ", 1)[1] for ln in err] == ["a", "c"]


def test_a_run_under_xdist_names_no_case_as_running(tmp_path):
    """Under ``-n`` the session learns only of finished work: a progress line must not
    call a case running that has already finished."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "--scenario", "two_images", "--scenario",
         "two_servers", "--seeds", "2", "-n", "2"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    progress = [ln for ln in out.stderr.splitlines() if "cases done" in ln]
    assert progress[-1] == "kvfault: 4/4 cases done; done", progress
    assert all(re.fullmatch(r"kvfault: [0-3]/4 cases done", ln) for ln in progress[:-1]), progress


def test_a_piped_run_prints_few_progress_lines(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "--regression", "side_chain_seed",
         "--seeds", "40", "-j", "1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    progress = [ln for ln in out.stderr.splitlines() if "cases done" in ln]
    assert 2 <= len(progress) <= 12, progress
    assert progress[-1] == "kvfault: 40/40 cases done; done"


@pytest.mark.slow
def test_pip_install_leaves_the_checkout_clean(tmp_path):
    """``pip install .`` from a fresh clone leaves nothing in it: ``git status`` is clean,
    ignored files included (no build/, no *.egg-info)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    # The working tree's files as they are (the clone has the last commit only).
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in tracked:
        src = ROOT / name
        if src.is_file():
            dst = clone / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)

    def status() -> str:  # every file git sees, ignored ones too (build/, *.egg-info)
        return subprocess.run(
            ["git", "-C", str(clone), "status", "--porcelain", "--ignored"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip

    before = status()
    target = tmp_path / "site"
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), "."],
        cwd=clone, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert (target / "kvfault" / "faults" / "cli.py").exists()
    # One top-level name: `import reference` fails, `import kvfault.faults.cli` works (-S:
    # no .pth file puts a checkout on sys.path).
    assert not [name for name in ("reference", "fakes", "faults") if (target / name).exists()]
    for module, code in (("reference", 1), ("kvfault.faults.cli", 0)):
        probe = f"import sys; sys.path.insert(0, {str(target)!r}); import {module}"
        out = subprocess.run(
            [sys.executable, "-S", "-c", probe],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == code, (module, out.stderr)
    assert status() == before
    # Every hook a build frontend calls, each in a process of its own, then all of them
    # twice in one process (tox keeps one backend process for every env it packages).
    out_dir = tmp_path / "out"
    hooks = [
        "get_requires_for_build_wheel()",
        "get_requires_for_build_sdist()",
        "prepare_metadata_for_build_wheel({d!r})",
        "build_wheel({d!r})",
        "build_sdist({d!r})",
    ]
    runs = [[h.format(d=str(out_dir / str(k)))] for k, h in enumerate(hooks)]
    runs.append([h.format(d=str(out_dir / f"again{k % 2}")) for k, h in enumerate(hooks * 2)])
    for d in [*map(str, range(len(hooks))), "again0", "again1"]:
        (out_dir / d).mkdir(parents=True)
    for calls in runs:
        code = "import hatchling.build as b; " + "; ".join(f"b.{c}" for c in calls)
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=clone, capture_output=True, text=True, timeout=600
        )
        assert out.returncode == 0, out.stderr
    assert len(list((out_dir / "again1").glob("kvfault-*.whl"))) == 1
    assert status() == before
