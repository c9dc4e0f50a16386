"""`kvfault prove`: a reviewer's two-head proof for any git repository.

``kvfault prove --old REV --new REV [--expect REGEX] [--repeat K] [--timeout S] -- CMD...``
checks both revisions out in temporary ``git worktree``s, runs CMD in each (cwd = the
worktree root) and prints a verdict:

=============== ==== ==============================================================
verdict         exit meaning
=============== ==== ==============================================================
FIXED           0    old fails (and matches ``--expect`` when given), new passes
STILL FAILING   1    new fails (whatever old did)
NOT REPRODUCED  2    old passes, or old fails without matching ``--expect``
COULD NOT JUDGE 2    a side exited 2 (``--unjudged-exits``): it could not run the code
FLAKY           2    with ``--repeat``: a side disagrees with itself (named)
ERROR           2    bad rev, not a repository, command not found, timeout, ...
=============== ==== ==============================================================

CMD after ``--`` with several words is executed directly (no shell); a single word is
run by ``/bin/sh -c`` so a quoted pipeline (``-- "make && ./check.sh"``) works.

The user's working tree, index, HEAD and stash are never touched: everything happens in
worktrees under a fresh temporary directory, removed afterwards, also on failure,
SIGINT, SIGTERM and SIGHUP.

Only the standard library is used, so this module works in any environment that has
git and Python.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn, TextIO

from kvfault.faults.errors import KvfaultError
from kvfault.faults.processes import (
    Interrupted,
    Signals,
    descendants,
    kill_group,
    reap_group,
    stop_descendants,
)
from kvfault.faults.proof import (
    UNJUDGED_EXITS,
    ProofResult,
    SideRun,
    decide,
    format_report,
    outcome,
)
from kvfault.faults.verdicts import EXIT_CODES, Verdict

__all__ = [
    "EXIT_CODES",
    "Interrupted",
    "ProofResult",
    "ProveError",
    "SideRun",
    "Verdict",
    "add_arguments",
    "decide",
    "format_report",
    "main",
    "outcome",
    "prove",
    "run",
]

DEFAULT_TAIL = 20

# Shell exit statuses that mean "the command itself could not be started" (POSIX sh:
# 126 = found but not executable, 127 = not found). Only consulted in shell mode; in
# exec mode the OSError from exec tells us directly.
_SHELL_CANNOT_RUN = {126: "command not executable", 127: "command not found"}

# Variables that would make git (and a CMD that calls git) look at the user's
# repository instead of the worktree it runs in.
_GIT_LOCATION_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
    "GIT_OBJECT_DIRECTORY",
)


class ProveError(KvfaultError):
    """A bad argument or a setup failure; ``str(exc)`` is the one line to show."""


# --------------------------------------------------------------------------- git


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in _GIT_LOCATION_VARS:
        env.pop(name, None)
    return env


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # core.hooksPath=/dev/null: `worktree add` would otherwise run the user's
    # post-checkout hook, which may do anything to anything.
    # start_new_session: a terminal Ctrl-C goes to our process group only, so git is
    # never killed half-way through creating or removing a worktree.
    try:
        return subprocess.run(
            ["git", "-c", "core.hooksPath=/dev/null", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            env=_clean_env(),
            start_new_session=True,
            check=False,
        )
    except FileNotFoundError:
        raise ProveError("git not found on PATH") from None


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


def _check_repo(repo: Path) -> None:
    if repo.exists() and not repo.is_dir():
        raise ProveError(f"not a directory: {repo}")
    if not repo.is_dir():
        raise ProveError(f"no such directory: {repo}")
    proc = _git(repo, "rev-parse", "--git-dir")
    if proc.returncode != 0:
        raise ProveError(f"not a git repository: {repo}")


def _resolve(repo: Path, which: str, rev: str) -> str:
    # A rev starting with '-' would be parsed by git as an option.
    if not rev or rev.startswith("-"):
        raise ProveError(f"invalid --{which} revision: {rev!r}")
    # Named first, then peeled: ``:/message`` would take a ``^{commit}`` suffix as part
    # of the message it searches for.
    proc = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", rev)
    named = proc.stdout.strip()
    if proc.returncode == 0 and named:
        proc = _git(repo, "rev-parse", "--verify", "--quiet", f"{named}^{{commit}}")
    if proc.returncode != 0 or not proc.stdout.strip():
        why = f"unknown --{which} revision: {rev!r} is not a commit in {repo}"
        if _git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() == "true":
            why += (
                ": this clone is shallow (its history is cut), so older commits are "
                "missing; fetch them with `git fetch --unshallow`"
            )
        raise ProveError(why)
    return proc.stdout.strip()


def notes(repo: Path, old: tuple[str, str], new: tuple[str, str]) -> list[str]:
    """One line each for what makes a two-head comparison weaker than it looks: both
    sides at one commit (``old``/``new``: the side's name and commit), uncommitted
    changes in the working tree (never part of it)."""
    out = []
    if old[1] == new[1]:
        out.append(
            f"{old[0]} and {new[0]} are the same commit ({old[1][:12]}): any difference "
            "between them is the command's own instability"
        )
    status = _git(repo, "status", "--porcelain", "--untracked-files=no")
    if status.returncode == 0 and status.stdout.strip():
        out.append(
            "the working tree has uncommitted changes: they are not part of this "
            "(each side is a clean checkout of its commit)"
        )
    return out


def source_env(worktree: Path) -> dict[str, str]:
    """The environment variables that name an engine checkout (``KVFAULT_ATOM_SRC``, a
    registered tier's source option's), each pointing at ``worktree``: inside a proof or
    a review, a side's checkout is its worktree whatever the caller exported."""
    try:
        from kvfault.faults.tiers import Tiers

        tiers = list(Tiers.installed())
    except Exception:  # noqa: BLE001 - no usable tier registry: nothing to point
        return {}
    return {o.env: str(worktree) for t in tiers for o in t.options if o.env}


def hide_worktree(text: str, worktree: Path, side: str) -> str:
    """``text`` with the path of a side's worktree (removed after the run) written as
    ``<SIDE worktree>``: a replay line must not point at a directory that is gone."""
    return hide_path(text, worktree, f"<{side} worktree>")


def hide_worktree_in_file(log: Path, worktree: Path, side: str) -> None:
    """``hide_worktree`` over a whole output file, line by line (it may be large); the
    file is replaced only when a line changed."""
    forms = sorted({str(worktree), os.path.realpath(worktree)}, key=len, reverse=True)
    needles = [f.encode("utf-8", "surrogateescape") for f in forms]
    if not log.is_file():
        return
    with open(log, "rb") as src:
        if not any(n in line for line in src for n in needles):
            return
    name = f"<{side} worktree>".encode()
    tmp = log.with_name(log.name + ".hiding")
    with open(log, "rb") as src, open(tmp, "wb") as dst:
        for line in src:
            for n in needles:
                line = line.replace(n, name)
            dst.write(line)
    os.replace(tmp, log)


def hide_path(text: str, path: Path, name: str) -> str:
    """``text`` with ``path`` (as given and resolved) written as ``name``."""
    for form in sorted({str(path), os.path.realpath(path)}, key=len, reverse=True):
        text = text.replace(form, name)
    return text


def _listed_worktrees(repo: Path) -> set[str]:
    proc = _git(repo, "worktree", "list", "--porcelain")
    return {
        os.path.realpath(line[len("worktree ") :])
        for line in proc.stdout.splitlines()
        if line.startswith("worktree ")
    }


def _add_worktree(repo: Path, path: Path, sha: str) -> None:
    proc = _git(repo, "worktree", "add", "--detach", "--quiet", str(path), sha)
    if proc.returncode != 0:
        raise ProveError(f"git worktree add {sha[:12]} failed: {_first_line(proc.stderr)}")


def _remove_worktrees(repo: Path, paths: Sequence[Path], tmp: Path | None) -> None:
    # --force twice: also removes a worktree git left locked ("initializing").
    for path in paths:
        _git(repo, "worktree", "remove", "--force", "--force", str(path))
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    # Prune only when one of ours is still registered: a bare `worktree prune` also
    # drops the user's own stale entries (say, a worktree on an unmounted disk), and
    # we promise to leave the user's things alone.
    ours = {os.path.realpath(p) for p in paths}
    if ours & _listed_worktrees(repo):
        _git(repo, "worktree", "prune")


@contextmanager
def side_worktrees(repo: Path, sides: Sequence[tuple[str, str]], prefix: str) -> Iterator[Path]:
    """A temporary directory holding a detached worktree ``<dir>/<name>`` of ``repo`` at
    each ``(name, sha)`` of ``sides``, for the block: prove's and review's sides. The
    stop signals are handled for the whole block (SIGINT/SIGTERM/SIGHUP arrive as
    ``Interrupted``) and held while the worktrees are made and removed, so a signal
    never leaves one half-made. However the block ends, they and the directory are
    removed; a worktree that cannot be made raises ``ProveError`` after the same."""
    signals = Signals()
    tmp: Path | None = None
    added: list[Path] = []
    try:
        signals.install()
        try:
            with signals.deferred():
                tmp = Path(tempfile.mkdtemp(prefix=prefix))
                for name, sha in sides:
                    added.append(tmp / name)  # before `add`: a half-made one is removed too
                    _add_worktree(repo, tmp / name, sha)
            yield tmp
        finally:
            with signals.deferred():
                _remove_worktrees(repo, added, tmp)
    finally:
        signals.restore()


# ------------------------------------------------------------------ running CMD


# The tail is read from the end of the log, never the whole of it: a run may print
# gigabytes. Past this many bytes the first line shown is cut (marked with "...").
TAIL_MAX_BYTES = 1 << 20
_TAIL_BLOCK = 1 << 16


def _tail(log_path: Path, lines: int, max_bytes: int = TAIL_MAX_BYTES) -> str:
    """The last ``lines`` lines of the output in ``log_path`` (lines as
    ``str.splitlines`` counts them), reading at most ``max_bytes`` from its end."""
    if lines <= 0:
        return ""
    with open(log_path, "rb") as log:
        end = log.seek(0, os.SEEK_END)
        floor = max(0, end - max_bytes)
        data, pos = b"", end
        # One line more than asked: the earliest line read may have started earlier.
        while pos > floor and data.count(b"\n") <= lines:
            step = min(_TAIL_BLOCK, pos - floor)
            pos -= step
            log.seek(pos)
            data = log.read(step) + data
        if pos > 0:
            log.seek(pos - 1)
            cut = log.read(1) != b"\n"  # the earliest line read started before pos
        else:
            cut = False
    shown = data.decode("utf-8", errors="replace").splitlines()
    cut = cut and len(shown) <= lines  # else that line is not shown anyway
    shown = shown[-lines:]
    if cut and shown:
        shown[0] = "..." + shown[0]
    return "\n".join(shown)


# A regex can backtrack for ever ('(a+)+$' on 32 characters): the search of a run's
# output runs in a child process, stopped past this bound (the run is then an ERROR).
EXPECT_SEARCH_S = 30.0
_SEARCH = (
    "import re, sys\n"
    "text = open(sys.argv[2], 'rb').read().decode('utf-8', errors='replace')\n"
    "sys.exit(0 if re.compile(sys.argv[1], re.MULTILINE).search(text) else 1)\n"
)


def _search(expect: re.Pattern[str], log_path: Path) -> tuple[bool | None, str | None]:
    """Whether ``expect`` matches the output in ``log_path``; None and why when the
    search could not finish."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", _SEARCH, expect.pattern, str(log_path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        code = proc.wait(timeout=EXPECT_SEARCH_S)
    except BaseException as exc:
        proc.kill()
        proc.wait()
        if not isinstance(exc, subprocess.TimeoutExpired):
            raise
        return None, (
            f"--expect {expect.pattern!r} took over {EXPECT_SEARCH_S:g} s to search the "
            "output (a regex that backtracks without end?)"
        )
    if code not in (0, 1):
        return None, f"--expect {expect.pattern!r} could not search the output (exit {code})"
    return code == 0, None


# How long a side has, from SIGTERM to its process group (on Ctrl-C, a stop signal or
# --timeout), to clean up after itself before SIGKILL: a side's own temp directories,
# sockets and servers are its to remove. `kvfault run --tier atom` took up to 1.7 s
# at load ~10; the 2 s this was left a margin of 0.3 s.
SIDE_STOP_GRACE_S = 5.0


def _run_once(
    *,
    command: list[str],
    shell: bool,
    cwd: Path,
    env: dict[str, str],
    timeout: float | None,
    log_path: Path,
    expect: re.Pattern[str] | None,
    tail_lines: int,
    rev: str,
    sha: str,
) -> SideRun:
    error: str | None = None
    returncode: int | None = None
    # Output goes to a file rather than a pipe: no reader thread, no deadlock on a
    # chatty command, and a crash still leaves it on disk.
    before = set(descendants(os.getpid()))
    with open(log_path, "wb") as log:
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                command[0] if shell else command,
                shell=shell,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except FileNotFoundError:
            error = f"command not found: {command[0]}"
        except PermissionError:
            error = f"command not executable: {command[0]}"
        except OSError as exc:
            error = f"cannot run {command[0]}: {exc.strerror or exc}"
        else:
            try:
                returncode = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                kill_group(proc, grace=SIDE_STOP_GRACE_S)
                error = f"timed out after {timeout:g} s"
            except BaseException:
                kill_group(proc, grace=SIDE_STOP_GRACE_S)
                raise
            finally:
                reap_group(proc.pid)
                # What it detached into a session of its own and left running, adopted
                # here (kvfault's own process): it must not outlive the worktree either.
                stop_descendants(grace_s=2.0, since=before)
        seconds = time.monotonic() - start
    if shell and returncode in _SHELL_CANNOT_RUN:
        error = f"{_SHELL_CANNOT_RUN[returncode]} (exit {returncode} from /bin/sh)"
    matched = None
    if expect is not None:
        matched, why = _search(expect, log_path)
        error = error or why
    return SideRun(
        rev=rev,
        sha=sha,
        returncode=returncode,
        seconds=seconds,
        tail=_tail(log_path, tail_lines),
        matched=matched,
        error=error,
    )


# --------------------------------------------------------------------- the proof


def _validate(
    command: Sequence[str], repeat: int, timeout: float | None, tail_lines: int, expect: str | None
) -> re.Pattern[str] | None:
    if not command or not command[0]:
        raise ProveError("missing command: put it after '--', e.g. -- pytest -x tests/")
    if repeat < 1:
        raise ProveError(f"--repeat must be at least 1, got {repeat}")
    if timeout is not None and not timeout > 0:
        raise ProveError(f"--timeout must be a positive number of seconds, got {timeout:g}")
    if tail_lines < 0:
        raise ProveError(f"--tail must be 0 or more, got {tail_lines}")
    if expect is None:
        return None
    try:
        return re.compile(expect, re.MULTILINE)
    except (re.error, OverflowError, RecursionError) as exc:  # x{99999999999}, deep nesting
        raise ProveError(f"invalid --expect regex {expect!r}: {exc}") from None


def prove(
    repo: str | os.PathLike[str],
    old: str,
    new: str,
    command: Sequence[str],
    *,
    expect: str | None = None,
    repeat: int = 1,
    timeout: float | None = None,
    tail_lines: int = DEFAULT_TAIL,
    progress: TextIO | None = None,
    unjudged: frozenset[int] = UNJUDGED_EXITS,
    artifacts: str | os.PathLike[str] | None = None,
) -> ProofResult:
    """Run COMMAND at revisions OLD and NEW of the repository at REPO and decide.

    ``command`` with one element runs through ``/bin/sh -c``; with more it is executed
    directly. Each side runs ``repeat`` times, old side first, in its own worktree
    (cwd = the worktree root, stdin = /dev/null, environment plus ``KVFAULT_PROVE_SIDE``,
    ``KVFAULT_PROVE_REV``, ``KVFAULT_PROVE_SHA``, ``KVFAULT_PROVE_RUN``). A run that
    cannot start or exceeds ``timeout`` seconds stops the proof with ERROR.

    Each run's ``KVFAULT_ARTIFACTS`` (where kvfault writes replay artifacts) is a
    directory of its own outside the worktrees: ``artifacts/<side>-<run>`` when
    ``artifacts`` is given, kept, and named by absolute path in the output; else one in
    the proof's temporary directory, removed with it, and written ``<SIDE artifacts>``
    in the output (a note says how to keep them).

    Raises ProveError for bad arguments and setup failures (not a repository, unknown
    revision, worktree creation failed); raises `Interrupted` on SIGINT/SIGTERM/SIGHUP. In
    every case the worktrees are removed first and the user's working tree is untouched.
    Also kills what CMD left running in its process group when it exits.
    """
    pattern = _validate(command, repeat, timeout, tail_lines, expect)
    command = list(command)
    shell = len(command) == 1
    repo_path = Path(repo).resolve() if Path(repo).exists() else Path(repo)
    _check_repo(repo_path)
    old_sha = _resolve(repo_path, "old", old)
    new_sha = _resolve(repo_path, "new", new)
    sides = (("old", old, old_sha), ("new", new, new_sha))
    runs: dict[str, list[SideRun]] = {"old": [], "new": []}
    shown: dict[str, str] = {}  # the sides whose output named their worktree
    gone: set[str] = set()  # the sides whose output named a removed artifact directory
    kept = Path(artifacts).absolute() if artifacts is not None else None
    said = notes(repo_path, ("old", old_sha), ("new", new_sha))
    if progress is not None:
        for n in said:
            print(f"kvfault prove: note: {n}", file=progress, flush=True)

    with side_worktrees(
        repo_path, [(side, sha) for side, _, sha in sides], "kvfault-prove-"
    ) as tmp:
        env = _clean_env()
        stop = False
        for side, rev, sha in sides:
            for i in range(1, repeat + 1):
                if progress is not None:
                    print(
                        f"kvfault prove: {side} {rev} ({sha[:12]}) run {i}/{repeat} ...",
                        file=progress,
                        flush=True,
                    )
                # Outside the worktree, which is removed: a replay artifact the
                # run writes (and names in its output) must outlive it, or not be named.
                art = (kept or tmp / "artifacts") / f"{side}-{i}"
                art.mkdir(parents=True, exist_ok=True)
                env.update(
                    KVFAULT_PROVE_SIDE=side,
                    KVFAULT_PROVE_REV=rev,
                    KVFAULT_PROVE_SHA=sha,
                    KVFAULT_PROVE_RUN=str(i),
                    KVFAULT_ARTIFACTS=str(art),
                    **source_env(tmp / side),
                )
                r = _run_once(
                    command=command,
                    shell=shell,
                    cwd=tmp / side,
                    env=env,
                    timeout=timeout,
                    log_path=tmp / f"{side}-{i}.log",
                    expect=pattern,
                    tail_lines=tail_lines,
                    rev=rev,
                    sha=sha,
                )
                hidden = hide_worktree(r.tail, tmp / side, side)
                if hidden != r.tail:
                    r.tail, shown[side] = hidden, sha
                if kept is None:
                    hidden = hide_path(r.tail, art, f"<{side} artifacts>")
                    if hidden != r.tail:
                        r.tail = hidden
                        gone.add(side)
                elif not any(art.iterdir()):
                    art.rmdir()  # nothing written: no empty directory left behind
                runs[side].append(r)
                if r.error is not None:  # the verdict is ERROR whatever comes next
                    stop = True
                    break
            if stop:
                break

    for side, sha in shown.items():
        said.append(
            f"<{side} worktree> is {side}'s checkout, removed after the proof; make it "
            f"again with: git worktree add --detach DIR {sha[:12]}"
        )
    for side in sorted(gone, reverse=True):  # old first
        said.append(
            f"<{side} artifacts> held {side}'s replay artifacts, removed after the proof; "
            "keep them with --artifacts DIR"
        )
    if kept is not None:
        said.append(f"replay artifacts kept in {kept}/<side>-<run>")
    verdict, reason = decide(runs["old"], runs["new"], unjudged)
    return ProofResult(
        verdict=verdict,
        old=runs["old"],
        new=runs["new"],
        reason=reason,
        command=command,
        shell=shell,
        expect=expect,
        old_rev=old,
        new_rev=new,
        old_sha=old_sha,
        new_sha=new_sha,
        repo=str(repo_path),
        notes=said,
    )


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `prove`'s options to PARSER (a subcommand parser or a standalone one).

    Everything after ``--`` lands in ``args.cmd`` with the ``--`` kept (argparse keeps
    it for REMAINDER); `run` checks it is there. Required options are checked by `run`,
    not by argparse, so a missing one gives the same one-line error as a bad value.
    """
    from kvfault.faults import argtypes  # stdlib only: cheap

    parser.add_argument("--old", metavar="REV", help="the revision expected to fail")
    parser.add_argument("--new", metavar="REV", help="the revision expected to pass")
    parser.add_argument(
        "--expect",
        metavar="REGEX",
        help="old only counts as failing if its output matches REGEX "
        "(re.search, MULTILINE, over stdout+stderr)",
    )
    parser.add_argument(
        "--repeat",
        metavar="K",
        type=argtypes.repeat,
        default=1,
        help="run each side K times; FLAKY if a side disagrees with itself",
    )
    parser.add_argument(
        "--timeout",
        metavar="S",
        type=argtypes.prove_timeout,
        default=None,
        help="seconds per run before it is killed (ERROR); 0 or left out: none",
    )
    parser.add_argument(
        "--tail",
        metavar="N",
        type=argtypes.tail_lines,
        default=DEFAULT_TAIL,
        help=f"output lines shown per run (default {DEFAULT_TAIL})",
    )
    parser.add_argument(
        "--unjudged-exits",
        metavar="CODES",
        type=unjudged_exits,
        default=UNJUDGED_EXITS,
        help="exit statuses with which CMD says it could not run the code under test "
        "(COULD NOT JUDGE, never a failing side): comma-separated, or 'none' "
        "(default 2: kvfault's; make's 2 is a failure, so give 'none' there)",
    )
    parser.add_argument(
        "--artifacts",
        metavar="DIR",
        type=argtypes.path,
        default=None,
        help="keep each run's replay artifacts (what kvfault writes to $KVFAULT_ARTIFACTS) "
        "in DIR/old-K and DIR/new-K; without it they are removed with the worktrees",
    )
    parser.add_argument(
        "-C",
        dest="repo",
        metavar="DIR",
        default=".",
        help="the git repository (default: current directory)",
    )
    parser.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- CMD ...",
        help="the command; one quoted word runs through /bin/sh -c",
    )


def unjudged_exits(text: str) -> frozenset[int]:
    """A ``type=`` for ``--unjudged-exits``: ``none`` or exit statuses 1-255, comma-separated."""
    if text.strip().lower() == "none":
        return frozenset()
    try:
        codes = frozenset(int(w) for w in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--unjudged-exits takes exit statuses like 2 or 2,3, or none; got {text!r}"
        ) from None
    if not codes or not all(1 <= c <= 255 for c in codes):
        raise argparse.ArgumentTypeError(f"--unjudged-exits: statuses are 1 to 255, got {text!r}")
    return codes


def _command_from(raw: Sequence[str]) -> list[str]:
    if not raw:
        raise ProveError("missing command: put it after '--', e.g. -- pytest -x tests/")
    if raw[0] != "--":
        raise ProveError(
            f"missing '--' before the command (got {shlex.join(raw)!r}); "
            "write: kvfault prove --old A --new B -- CMD ..."
        )
    return list(raw[1:])


def run(args: argparse.Namespace) -> int:
    """Run the proof described by ARGS (from `add_arguments`); return the exit code.

    Prints the report on stdout and progress on stderr. Bad arguments and setup
    failures print one line on stderr and return 2; SIGINT/SIGTERM/SIGHUP return 130/143/129
    after removing the worktrees.
    """
    try:
        if not args.old or not args.new:
            raise ProveError("both --old REV and --new REV are required")
        command = _command_from(args.cmd)
        if args.artifacts is not None:
            from kvfault.faults.argtypes import dir_refused

            why = dir_refused(args.artifacts, "--artifacts")
            if why:
                raise ProveError(why)
        result = prove(
            args.repo,
            args.old,
            args.new,
            command,
            expect=args.expect,
            repeat=args.repeat,
            timeout=args.timeout,
            tail_lines=args.tail,
            progress=sys.stderr,
            unjudged=args.unjudged_exits,
            artifacts=args.artifacts,
        )
    except ProveError as exc:
        print(f"kvfault prove: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        name = signal.Signals(signum).name
        print(f"kvfault prove: interrupted by {name}; worktrees removed", file=sys.stderr)
        return 128 + signum
    print(format_report(result), flush=True)
    return result.exit_code


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; we promise one line, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kvfault.faults.prove ...``: the same as ``kvfault prove ...``."""
    parser = _OneLineParser(
        prog="kvfault prove", description="Prove that NEW fixes what fails at OLD."
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    from kvfault.faults.processes import adopt_orphans

    adopt_orphans()  # as kvfault's console script does: what CMD detaches stays below
    sys.exit(main())
