"""``tox -e atom``: the atom tier's tests and campaign against ``KVFAULT_ATOM_SRC``.

Without a usable checkout: one ``skipped`` line and exit 0, before installing anything.
With one: installs kvfault with the lmcache and atom extras (constraints/ci.txt pins the
CPU torch) into this environment and runs ``cpu_tests/atom``.

Usage: python scripts/atom_env.py REPO_ROOT [PYTEST_ARGS...]
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve()
    src = os.environ.get("KVFAULT_ATOM_SRC")
    if not src:
        print("atom: skipped (KVFAULT_ATOM_SRC is not set: no ATOM checkout to test)")
        return 0
    if not (Path(src) / "atom/kv_transfer/offload").is_dir():
        print(f"atom: skipped (KVFAULT_ATOM_SRC={src} is not an ATOM checkout)")
        return 0
    pip = [sys.executable, "-m", "pip", "install", "-q", "-c", str(root / "constraints/ci.txt")]
    subprocess.run([*pip, f"{root}[lmcache,atom,test]"], check=True)
    tests = [sys.executable, "-m", "pytest", str(root / "cpu_tests/atom"), "-m", "atom"]
    return subprocess.run([*tests, *argv[1:]], cwd=root).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
