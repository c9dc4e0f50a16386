"""Issue 24, item 6: the sessions that README.md and docs/reviewer.md show are what the
tool prints today. Every documented ``$ kvfault ...`` (and ``$ cat`` of what it wrote)
whose output does not depend on the machine (no wall times) runs here, in order, in one
fresh directory, and must print exactly the documented lines and exit status."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "docs" / "reviewer.md"]
# Commands whose output names wall times or the machine: documented, not compared.
SKIP = re.compile(r"^kvfault run\b|^python |^cat .*junit\.xml|^cat .*summary\.json")


def sessions(text: str) -> list[tuple[str, list[str], int | None]]:
    """``(command, output lines, exit status)`` for each ``$ `` line of each text block."""
    out: list[tuple[str, list[str], int | None]] = []
    for block in re.findall(r"^```text\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        cmd: str | None = None
        lines: list[str] = []
        for line in block.splitlines():
            m = re.fullmatch(r"\[exit (\d+)\]", line)
            if line.startswith("$ ") or m:
                if cmd is not None:
                    out.append((cmd, lines, int(m.group(1)) if m else None))
                cmd, lines = (line[2:], []) if not m else (None, [])
            elif cmd is not None:
                lines.append(line)
        if cmd is not None:
            out.append((cmd, lines, None))
    return out


def _documented() -> list[tuple[str, str, list[str], int | None]]:
    return [
        (doc.name, cmd, lines, code)
        for doc in DOCS
        for cmd, lines, code in sessions(doc.read_text())
        if not SKIP.match(cmd)
    ]


def test_the_docs_show_sessions_to_compare():
    cmds = [c for _, c, _, _ in _documented()]
    assert any(c.startswith("kvfault repro") for c in cmds)
    assert any(c.startswith("kvfault replay") for c in cmds)


def test_documented_sessions_print_what_the_tool_prints(tmp_path):
    pytest.importorskip("matplotlib")  # the sessions draw timelines
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONHASHSEED", None)
    env.pop("KVFAULT_ARTIFACTS", None)
    # The hand-edited artifact the reviewer's guide replays.
    (tmp_path / "bad.json").write_text('{"kvfault_artifact": 1, "seed": "zero"}\n')
    kv = [sys.executable, "-m", "kvfault.faults.cli"]
    wrong = []
    for doc, cmd, lines, code in _documented():
        argv = shlex.split(cmd)
        argv = kv + argv[1:] if argv[0] == "kvfault" else argv
        got = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        printed = (got.stdout + got.stderr).splitlines()
        if printed != lines or (code is not None and got.returncode != code):
            wrong.append(
                f"{doc}: $ {cmd}\n  documented ({code}):\n    "
                + "\n    ".join(lines)
                + f"\n  printed ({got.returncode}):\n    "
                + "\n    ".join(printed)
            )
    assert wrong == [], "\n".join(wrong)
