"""The backend ``kvfault run`` asks for (``open_backend``): this process on a tier's
executor, forked workers (``kvfault.faults.campaign.pool``) or pytest-xdist workers and hosts
(``kvfault.faults.campaign.xdist``). The top of the campaign package: it imports every
backend, none of them imports it."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Sequence

from kvfault.faults.campaign.pool import ForkPool, can_fork, units, usable_cpus
from kvfault.faults.campaign.session import Backend, InProcess
from kvfault.faults.campaign.targets import Target
from kvfault.faults.campaign.tiers import open_executor
from kvfault.faults.campaign.xdist import Xdist
from kvfault.faults.tiers import Tiers


@contextlib.contextmanager
def open_backend(
    tier: str,
    targets: Sequence[Target],
    seeds: Sequence[int],
    *,
    jobs: int | str | None = None,
    workers: str | None = None,
    tx: Sequence[str] = (),
    rsyncdirs: Sequence[str] = (),
    options: Mapping[str, Any] | None = None,
) -> Iterator[Backend]:
    """The backend ``kvfault run`` asks for: pytest-xdist with ``workers`` (``-n``,
    not 0) or ``tx``; a forked pool when ``jobs`` (``-j``, default ``auto``) gives the
    tier (one that declares ``parallel``) more than one process (``jobs_here``); else this process, on
    ``tier``'s executor, opened here with ``options`` (the tier's own, as its
    ``TierOption``s name them) and closed on exit (``open_executor``)."""
    if tx or workers not in (None, "0"):
        yield Xdist(workers, tx, rsyncdirs)
        return
    n = jobs_here(jobs, targets, seeds) if Tiers.installed()[tier].parallel else 1
    if n > 1:
        yield ForkPool(n)
        return
    with open_executor(tier, **(options or {})) as executor:
        yield InProcess(executor)


def jobs_here(jobs: int | str | None, targets: Sequence[Target], seeds: Sequence[int]) -> int:
    """``-j``: processes for a tier that runs in many (``Tier.parallel``); ``auto`` (the default) is one per
    usable CPU; never more than the campaign's units of work (one unit: this process
    alone), and 1 where workers cannot be forked."""
    if not can_fork():
        return 1
    wanted = usable_cpus() if jobs in (None, "auto") else int(jobs)
    return min(wanted, len(units(targets, seeds)))
