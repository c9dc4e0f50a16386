"""The ``kvfault`` command line.

Exit codes: 0 everything holds; 1 a property failed (or a regression is still failing);
2 bad arguments, an error, or nothing reproduced. Bad arguments give one clear line on
stderr and no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line, exit 2, no usage dump
        print(f"kvfault: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _seed_count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds wants a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"--seeds must be at least 1, got {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvfault", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    run = sub.add_parser("run", help="run every scenario on the fixed stack and check every property")
    run.add_argument("--seeds", type=_seed_count, default=1, help="seeds per scenario (default 1)")
    run.add_argument("--first-seed", type=int, default=0, help="first seed (default 0)")
    run.add_argument("--scenario", action="append", default=None, metavar="NAME", help="run only this scenario (repeatable)")
    run.add_argument("--report", type=Path, default=None, metavar="DIR", help="write summary.json into DIR")
    run.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    lst = sub.add_parser("list", help="list scenarios, properties (and faults and regressions)")
    lst.add_argument("--scenarios", action="store_true", help="only scenarios")
    lst.add_argument("--properties", action="store_true", help="only properties")
    return parser


def _cmd_list(args: argparse.Namespace) -> int:
    from faults.properties import PROPERTIES
    from faults.scenarios import SCENARIOS

    show_all = not (args.scenarios or args.properties)
    if show_all or args.scenarios:
        if show_all:
            print("scenarios:")
        for s in SCENARIOS.values():
            print(f"  {s.name:24s} {s.description}")
    if show_all or args.properties:
        if show_all:
            print("properties:")
        for name, fn in PROPERTIES.items():
            print(f"  {name:24s} {(fn.__doc__ or '').split(chr(10))[0].strip()}")
        print(f"  {'determinism':24s} the same seed gives the same trace digest")
    return 0


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join([line, sep, *body])


def _progress(enabled: bool, i: int, total: int, label: str) -> None:
    if not enabled:
        return
    width = 24
    done = int(width * i / total)
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{total} {label[:40]:40s}")
    if i == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _cmd_run(args: argparse.Namespace) -> int:
    from faults.runner import run_case
    from faults.scenarios import SCENARIOS

    names = args.scenario or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"kvfault: error: unknown scenario {unknown[0]!r} (see `kvfault list`)", file=sys.stderr)
        return 2
    cases = [(n, args.first_seed + k) for n in names for k in range(args.seeds)]
    show = not args.no_progress and sys.stderr.isatty()
    t0 = time.perf_counter()
    results = []
    for i, (name, seed) in enumerate(cases):
        _progress(show, i, len(cases), f"{name} seed {seed}")
        results.append(run_case(name, seed))
    _progress(show, len(cases), len(cases), "done")
    rows = [
        [
            r.scenario,
            str(r.seed),
            ",".join(r.checked),
            "PASS" if r.ok else "FAIL",
            f"{r.sim_seconds:.2f}",
            f"{r.wall_seconds:.3f}",
            (r.stop or "-")[:60],
        ]
        for r in results
    ]
    print(_table(rows, ["scenario", "seed", "properties", "verdict", "sim s", "wall s", "stop"]))
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"\nFAIL {r.scenario} seed {r.seed}:")
        for v in r.violations:
            print(f"  {v}")
    wall = time.perf_counter() - t0
    print(f"\n{len(results) - len(failed)} passed, {len(failed)} failed in {wall:.2f}s wall")
    if args.report:
        args.report.mkdir(parents=True, exist_ok=True)
        summary = {
            "passed": len(results) - len(failed),
            "failed": len(failed),
            "wall_seconds": wall,
            "cases": [
                {
                    "scenario": r.scenario,
                    "seed": r.seed,
                    "ok": r.ok,
                    "properties": r.checked,
                    "violations": [str(v) for v in r.violations],
                    "sim_seconds": r.sim_seconds,
                    "wall_seconds": r.wall_seconds,
                    "digest": r.digest,
                    "stop": r.stop,
                    "notes": r.notes,
                }
                for r in results
            ],
        }
        (args.report / "summary.json").write_text(json.dumps(summary, indent=2))
    return 1 if failed else 0


COMMANDS = {"run": _cmd_run, "list": _cmd_list}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return COMMANDS[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
