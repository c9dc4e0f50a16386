"""The ``vllm`` tier's command-line edges: what ``kvfault run --tier vllm`` refuses
(``refused``) and ``kvfault list --tier vllm`` (``list_command``). Bad input: one
line, exit 2."""

from __future__ import annotations

from typing import Any

from kvfault.faults.tiers import Selection
from kvfault.faults.vllm.catalog import NOT_HERE, ROWS, SCENARIOS


def refused(selection: Selection) -> str | None:
    """One line for a ``--vllm-fix`` that is neither on nor off (None: it can run)."""
    fix = selection.options.get("vllm_fix")
    if fix is not None and fix not in ("on", "off"):
        return f"--vllm-fix takes on or off, got {fix!r}"
    return None


def list_command(args: Any) -> int:
    """What runs with ``--tier vllm``, what judges it, and what does not run and why."""
    from kvfault.faults.tiers.listing import print_not_here, print_properties, shows_all

    show_all = shows_all(args)
    if show_all or args.scenarios:
        print("scenarios (--tier vllm):")
        for r in ROWS.values():
            if r.kind == "scenario":
                print(f"  {r.name}  {r.description} [{', '.join(r.properties)}]")
    if show_all or args.faults:
        print("faults (--tier vllm):")
        for r in ROWS.values():
            if r.kind == "fault":
                props = ", ".join(SCENARIOS[r.scenario].properties)
                print(f"  {r.name}  {r.description} (on {r.scenario}) [{props}]")
    if show_all or args.properties:
        print_properties("vllm", {p for s in SCENARIOS.values() for p in s.properties})
    if show_all or args.regressions:
        print_not_here("vllm", NOT_HERE)
    return 0
