"""``kvfault review`` (faults/review.py, faults/review_diff.py): the per-row diff, its
verdict and exit codes, and whole reviews on the in-process tier against a scratch
kvfault repository (issue 34, items 2, 6, 7, 13 and "a review command")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from process_group import group_killed_at_exit, wait_until

from kvfault.faults import review_diff as rd
from kvfault.faults.review_diff import Row, decide, diff, finding_anchor, markdown
from kvfault.faults.verdicts import Verdict

ROOT = Path(__file__).resolve().parents[2]


def row(verdict: str, name: str = "x", prop: str | None = None) -> Row:
    return Row(f"scenario:{name}", {"kind": "scenario", "name": name}, verdict, prop, "msg")


def never(rows: list[Row]) -> dict[str, tuple[list[str], list[str]]]:
    raise AssertionError("a row that agrees on both sides is not re-run")


def reruns(base: list[str], head: list[str]):
    calls: list[str] = []

    def rerun(rows: list[Row]) -> dict[str, tuple[list[str], list[str]]]:
        calls.extend(r.id for r in rows)
        return {r.id: (base, head) for r in rows}

    return rerun, calls


def test_full_passes_on_to_both_sides_and_a_rerun_of_one_row_drops_it():
    from kvfault.faults.cli import build_parser
    from kvfault.faults.review import _run_words, _strip_selection
    from kvfault.faults.tiers import Tiers

    args = build_parser().parse_args(["review", "a", "b", "--tier", "atom", "--full"])
    words = _run_words(args, Tiers.installed()["atom"])
    assert "--full" in words
    assert "--full" not in _strip_selection([*words, "--scenario", "x"])
    plain = build_parser().parse_args(["review", "a", "b", "--tier", "atom"])
    assert "--full" not in _run_words(plain, Tiers.installed()["atom"])


def test_a_stable_change_breaks_or_fixes():
    rerun, calls = reruns(["pass", "pass"], ["fail", "fail"])
    (d,) = diff({"a": row("PASS")}, {"a": row("FAIL", prop="identity")}, rerun)
    assert d.status == rd.BREAKS and calls == ["scenario:x"]
    assert d.base_runs == ["pass"] * 3 and d.head_runs == ["fail"] * 3
    rerun, _ = reruns(["fail", "fail"], ["pass", "pass"])
    (d,) = diff({"a": row("FAIL")}, {"a": row("PASS")}, rerun)
    assert d.status == rd.FIXES


def test_the_rows_that_differ_are_re_run_together_once():
    batches: list[list[str]] = []

    def rerun(rows):
        batches.append([r.id for r in rows])
        return {r.id: (["pass"], ["fail"]) for r in rows}

    base = {"a": row("PASS", "a"), "b": row("PASS", "b"), "c": row("FAIL", "c")}
    head = {"a": row("FAIL", "a"), "b": row("FAIL", "b"), "c": row("FAIL", "c")}
    got = diff(base, head, rerun)
    assert batches == [["scenario:a", "scenario:b"]]
    assert [d.status for d in got] == [rd.BREAKS, rd.BREAKS, rd.KNOWN]


def test_a_row_that_flips_on_identical_runs_is_unstable_never_a_change():
    rerun, _ = reruns(["pass", "pass"], ["pass", "fail"])
    (d,) = diff({"a": row("PASS")}, {"a": row("FAIL")}, rerun)
    assert d.status == rd.UNSTABLE
    # Both sides flip the same way on their re-runs: noise, not a change.
    rerun, _ = reruns(["fail", "fail"], ["pass", "pass"])
    (d,) = diff({"a": row("PASS")}, {"a": row("FAIL")}, rerun)
    assert d.status == rd.UNSTABLE
    v, _ = decide([d], None)
    assert v == Verdict.UNCHANGED


def test_failing_on_both_is_known_and_error_is_not_judged():
    rows = diff(
        {"a": row("FAIL", "a"), "b": row("ERROR", "b"), "c": row("PASS", "c")},
        {"a": row("FAIL", "a"), "b": row("FAIL", "b"), "c": row("PASS", "c")},
        never,
    )
    assert [d.status for d in rows] == [rd.KNOWN, rd.UNJUDGED_ROW, rd.SAME]
    assert decide(rows, None)[0] == Verdict.COULD_NOT_JUDGE


@pytest.mark.parametrize(
    "statuses, unjudged, verdict, code",
    [
        ([rd.BREAKS, rd.FIXES, rd.UNJUDGED_ROW], None, Verdict.REGRESSED, 1),
        ([rd.FIXES, rd.KNOWN], None, Verdict.FIXED, 0),
        ([rd.KNOWN, rd.SAME, rd.UNSTABLE], None, Verdict.UNCHANGED, 3),
        ([rd.FIXES, rd.UNJUDGED_ROW], None, Verdict.COULD_NOT_JUDGE, 2),
        ([], "base could not import ATOM", Verdict.COULD_NOT_JUDGE, 2),
    ],
)
def test_the_verdict_and_its_exit_code(statuses, unjudged, verdict, code):
    rows = [rd.RowDiff(f"r{i}", s, None, None) for i, s in enumerate(statuses)]
    got, _ = decide(rows, unjudged)
    assert got == verdict and got.exit_code == code


def test_a_known_row_points_at_its_finding(tmp_path):
    doc = tmp_path / "findings.md"
    doc.write_text(
        "# F\n\n## 6. A failed store is reported as a finished save (`store_failure`, efficiency)\n"
    )
    assert finding_anchor(doc, "store_failure", "docs/atom/findings.md") == (
        "docs/atom/findings.md#6-a-failed-store-is-reported-as-a-finished-save-store_failure-efficiency"
    )
    assert finding_anchor(doc, "store", "d.md") is None
    # A finding named by its reproduction line, not its heading.
    doc.write_text(
        "## 1. Lookup pins leak (resources)\n\ntext `two_servers`\n\n```\n"
        "kvfault run --tier atom --scenario resend_at_defaults --scenario reload_twice\n```\n"
        "## 2. Two servers share a socket (identity)\n\n```\nkvfault run --tier atom --scenario two_servers\n```\n"
        "## Rows that pass\n\n```\nkvfault run --tier atom --scenario prefix_reuse\n```\n"
    )
    assert finding_anchor(doc, "reload_twice", "f.md") == "f.md#1-lookup-pins-leak-resources"
    assert (
        finding_anchor(doc, "two_servers", "f.md") == "f.md#2-two-servers-share-a-socket-identity"
    )
    assert finding_anchor(doc, "prefix_reuse", "f.md") is None  # not a numbered finding
    assert finding_anchor(doc, "reload", "f.md") is None


def test_the_markdown_names_each_change_and_ends_with_the_verdict():
    d = rd.RowDiff("fault:f", rd.BREAKS, row("PASS"), row("FAIL", prop="liveness"),
                   ["pass"] * 3, ["fail"] * 3)  # fmt: skip
    text = markdown(command="kvfault review a b", sides=[], rows=[d],
                    verdict=Verdict.REGRESSED, reason="1 breaking")  # fmt: skip
    assert "**This PR breaks** (1)" in text
    assert "| `fault:f` | PASS 3/3 | FAIL 3/3 | liveness | msg |" in text
    assert text.splitlines()[-1] == "**REGRESSED**: 1 breaking"


# ------------------------------------------------------------ whole reviews


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com",
         "-c", "commit.gpgsign=false", *args],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


IDENTITY = "reference/rules/identity.py"
WITH_PORT = "        if port > 0:\n"


@pytest.fixture(scope="module")
def kv_repo(tmp_path_factory) -> Path:
    """A scratch git repository of kvfault's packages: the fixed stack (main), the
    engine id without its port (broken), a docs-only change (docs), and a syntax
    error in the command line (unimportable)."""
    repo = tmp_path_factory.mktemp("kv") / "repo"
    repo.mkdir()
    for part in ("faults", "reference", "fakes", "kvfault"):  # kvfault/: links to the three
        shutil.copytree(ROOT / part, repo / part, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    # kvfault's own tiers are declared there: a checkout finds them as they stand.
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    (repo / "NOTES.md").write_text("notes\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "fixed")
    git(repo, "tag", "fixed")
    src = (repo / IDENTITY).read_text()
    assert WITH_PORT in src
    (repo / IDENTITY).write_text(src.replace(WITH_PORT, "        if port > 0 and False:\n"))
    git(repo, "commit", "-q", "-am", "engine id without port")
    git(repo, "tag", "broken")
    (repo / IDENTITY).write_text(src)
    git(repo, "commit", "-q", "-am", "fix it again")
    git(repo, "tag", "refixed")
    (repo / "NOTES.md").write_text("notes, edited\n")
    git(repo, "commit", "-q", "-am", "docs only")
    git(repo, "tag", "docs")
    (repo / "faults" / "cli.py").write_text("def broken(:\n")
    git(repo, "commit", "-q", "-am", "syntax error")
    git(repo, "tag", "unimportable")
    return repo


def review(
    repo: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "kvfault.faults.cli", "review", "-C", str(repo), "-k", "1",
            "--scenario", "two_servers", "--scenario", "two_images", "--seeds", "1", *args]  # fmt: skip
    run_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(argv, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=600)


def verdict_line(out: str) -> str:
    return out.strip().splitlines()[-1]


def test_review_says_what_a_commit_breaks_fixes_or_leaves(kv_repo, tmp_path):
    got = review(kv_repo, "fixed", "broken", "--report", str(tmp_path / "rep"))
    assert got.returncode == 1, got.stdout + got.stderr
    assert "| `scenario:two_servers` | PASS 2/2 | FAIL 2/2 |" in got.stdout
    assert verdict_line(got.stdout).startswith("report:")
    assert "**REGRESSED**: 1 breaking" in got.stdout
    for side in ("base", "head"):
        assert (tmp_path / "rep" / side / "summary.json").is_file()
    assert (tmp_path / "rep" / "review.md").read_text().startswith("### kvfault review: REGRESSED")
    obj = json.loads((tmp_path / "rep" / "review.json").read_text())
    assert (obj["verdict"], obj["exit_code"]) == ("REGRESSED", 1)
    assert obj["counts"]["breaks"] == 1 and obj["counts"]["same"] == 1
    (row,) = [r for r in obj["rows"] if r["status"] == "breaks"]
    assert row["id"] == "scenario:two_servers" and row["head_runs"] == ["fail", "fail"]

    got = review(kv_repo, "broken", "refixed")
    assert got.returncode == 0, got.stdout + got.stderr
    assert "**This PR fixes** (1)" in got.stdout and "EngineIdentityConflict" in got.stdout

    got = review(kv_repo, "refixed", "docs")
    assert got.returncode == 3, got.stdout + got.stderr
    assert verdict_line(got.stdout).startswith("**UNCHANGED**")
    assert "2 rows pass on both sides." in got.stdout
    assert git(kv_repo, "worktree", "list").count("\n") == 1  # the worktrees are gone


def test_a_side_that_cannot_import_its_code_is_could_not_judge_never_fixed(kv_repo):
    got = review(kv_repo, "unimportable", "docs")
    assert got.returncode == 2, got.stdout + got.stderr
    last = verdict_line(got.stdout)
    assert last.startswith("**COULD NOT JUDGE**: cannot import kvfault at unimportable")
    assert "FIXED" not in got.stdout


def test_one_commit_two_argument_sets_is_an_a_b_of_one_change(kv_repo):
    """The sides differ by their arguments only: the same commit, one line saying so."""
    got = review(kv_repo, "docs", "docs", "--head-args", "--legacy engine_id_without_port")
    assert got.returncode == 1, got.stdout + got.stderr
    assert "both sides run commit" in got.stdout
    assert "| `scenario:two_servers` |" in got.stdout


def test_same_commit_dirty_tree_and_shallow_clone_each_get_one_line(kv_repo, tmp_path):
    (kv_repo / "NOTES.md").write_text("dirty\n")
    try:
        got = review(kv_repo, "docs", "docs", "--scenario", "two_images")
    finally:
        git(kv_repo, "checkout", "--", "NOTES.md")
    assert "same commit" in got.stderr and "uncommitted changes" in got.stderr
    assert got.returncode == 3, got.stdout + got.stderr
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{kv_repo}", str(shallow)],
                   check=True, capture_output=True)  # fmt: skip
    got = review(shallow, "HEAD~1", "HEAD")
    assert got.returncode == 2
    assert got.stderr.strip().count("\n") == 0 and "shallow" in got.stderr, got.stderr


def test_bad_arguments_are_one_line(kv_repo):
    got = review(kv_repo, "fixed", "nope")
    assert got.returncode == 2 and "unknown --head revision: 'nope'" in got.stderr
    got = review(kv_repo, "fixed", "docs", "--tier", "atom", "--atom-src", "/x")
    assert got.returncode == 2 and "drop --atom-src" in got.stderr
    got = review(kv_repo, "fixed", "docs", "--tier", "lmcache")
    assert got.returncode == 2 and "tests installed packages" in got.stderr


def test_a_head_that_cannot_run_is_told_without_running_the_base(kv_repo):
    got = review(kv_repo, "docs", "unimportable")
    assert got.returncode == 2, got.stdout + got.stderr
    assert "- **base** `docs`" in got.stdout
    assert "(not run: the other side could not be judged)" in got.stdout
    assert "base docs" not in got.stderr  # its campaign never started
    assert "kvfault-review-" not in got.stdout  # no path into a removed worktree
    assert verdict_line(got.stdout).startswith(
        "**COULD NOT JUDGE**: cannot import kvfault at unimportable"
    )


def _start_review(kv_repo: Path, tmp: Path, new_session: bool = False) -> subprocess.Popen[str]:
    """``kvfault review fixed broken`` on one fault and one scenario in a process of its
    own, its temporary files in ``tmp``. 300 seeds make each side's campaign last seconds
    (about 24 s on a 2-core machine, 600 runs), so a signal sent half a second after it
    starts finds it running: with one seed it ended in well under a second, and a CI run
    once found no campaign left to stop."""
    argv = [sys.executable, "-m", "kvfault.faults.cli", "review", "-C", str(kv_repo), "fixed", "broken",
            "--seeds", "300", "--fault", "slow_forward", "--scenario", "loaded_restart_burst"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)}
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=new_session)  # fmt: skip


def test_a_stopped_review_removes_its_worktrees(kv_repo, tmp_path):
    """SIGTERM mid-campaign: one line, exit 143, no worktree and no temporary directory
    left (the sides' campaigns are stopped with it)."""
    import signal
    import time

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _start_review(kv_repo, tmp)
    try:
        deadline = time.monotonic() + 120
        while git(kv_repo, "worktree", "list").count("\n") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert git(kv_repo, "worktree", "list").count("\n") == 3
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert (
        err.strip().splitlines()[-1] == "kvfault review: interrupted by SIGTERM; worktrees removed"
    )
    assert git(kv_repo, "worktree", "list").count("\n") == 1
    assert list(tmp.iterdir()) == []


def test_a_report_place_that_cannot_be_written_is_one_line_before_anything_runs(kv_repo, tmp_path):
    (tmp_path / "file").write_text("x")
    got = review(kv_repo, "fixed", "docs", "--report", str(tmp_path / "file"))
    assert got.returncode == 2 and got.stderr.strip().endswith("is a file, not a directory")
    assert "the campaign" not in got.stderr


def test_sigint_to_the_process_group_while_a_side_runs_leaves_nothing(kv_repo, tmp_path):
    """Ctrl-C as a terminal sends it: SIGINT to review's whole process group (review in a
    session of its own) while a side's campaign (a `kvfault run` process) runs. Exit
    130, one line, and no worktree, temporary directory or process left."""
    import signal
    import time

    from kvfault.faults.processes import descendants

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _start_review(kv_repo, tmp, new_session=True)

    def campaigns() -> list[int]:
        out = []
        for pid in descendants(proc.pid):
            try:
                words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"kvfault.faults.cli" in words and b"run" in words:
                out.append(pid)
        return out

    with group_killed_at_exit(proc):
        wait_until(campaigns, proc, 120, never="no side's campaign started")
        time.sleep(0.5)  # into the campaign, past its start
        below = descendants(proc.pid)
        assert below and git(kv_repo, "worktree", "list").count("\n") == 3
        dirs = [w.split()[0] for w in git(kv_repo, "worktree", "list").splitlines()[1:]]
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert lines[-1] == "kvfault review: interrupted by SIGINT; worktrees removed", err
    assert not any("interrupted" in ln or "Traceback" in ln for ln in lines[:-1]), err
    assert git(kv_repo, "worktree", "list").count("\n") == 1
    assert not any(Path(d).exists() for d in dirs)
    assert list(tmp.iterdir()) == []

    def alive(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state != "Z"

    deadline = time.monotonic() + 10  # a kill lands asynchronously; bounded
    while any(alive(p) for p in below) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [p for p in below if alive(p)] == [], "a side's process outlived the review"
