"""Without lmcache, cpu_tests/lmcache skips with ONE line naming the extra and the
README's install command (issue 12, item 2). The environment without lmcache is this
interpreter with a ``sitecustomize`` that hides the packages from every import finder,
exactly as if they were not installed (``find_spec`` is None, ``import`` fails)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_COMMAND = "pip install -c constraints/ci.txt '.[lmcache]'"

HIDE = textwrap.dedent(
    """
    import os, sys
    _HIDDEN = tuple(os.environ["KVF_HIDE"].split(","))

    class _Hide:
        def __init__(self, inner):
            self.inner = inner

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in _HIDDEN:
                return None
            return self.inner.find_spec(name, path, target)

        def __getattr__(self, attr):
            return getattr(self.inner, attr)

    sys.meta_path[:] = [_Hide(f) if hasattr(f, "find_spec") else f for f in sys.meta_path]
    """
)


def _without(tmp_path: Path, hidden: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "sitecustomize.py").write_text(HIDE)
    env = {**os.environ, "KVF_HIDE": hidden}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_blocker_hides_lmcache(tmp_path):
    out = _without(tmp_path, "lmcache", "-c", "import lmcache")
    assert "No module named 'lmcache'" in out.stderr


@pytest.mark.parametrize("hidden", ["lmcache", "lmcache,torch", "torch"])
def test_cpu_tests_lmcache_skip_with_one_line_without_lmcache(tmp_path, hidden):
    out = _without(
        tmp_path, hidden, "-m", "pytest", "cpu_tests/lmcache", "-rs", "-q", "-p", "no:cacheprovider"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    skipped = [line for line in out.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, out.stdout
    assert "lmcache extra" in skipped[0] and README_COMMAND in skipped[0]
    assert "error" not in out.stdout.lower().replace("0 errors", "")


def test_the_skip_names_the_readme_command():
    assert README_COMMAND in (ROOT / "README.md").read_text()
