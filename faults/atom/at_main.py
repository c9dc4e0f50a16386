"""What each row of the ``atom`` tier does at ATOM's main, the commit the tier's
findings were made on (``PINNED``): the rows that FAIL there (``FAILING``), each with
the property its FAIL names and what it is (a finding of docs/atom/findings.md, by its
number; a reviewed lead; a reviewed lead in lmcache's own code); every other row
PASSes there.

Plain data, the one place that says it: ``kvfault list --tier atom`` prints each row's
(``AtMain.line``), the default set's rule reads it (every failing row runs by default,
docs/atom/tier.md) and the campaign's test holds a campaign's table to it
(``disagreement``)."""

from __future__ import annotations

from dataclasses import dataclass

from kvfault.faults.properties.names import Prop
from kvfault.faults.verdicts import Verdict

PINNED = "ffdf3bb5d"  # ATOM's main, as docs/atom/findings.md names it

FINDING, LEAD, LMCACHE_LEAD = "finding", "lead", "lmcache lead"


@dataclass(frozen=True)
class AtMain:
    """A row's verdict at ``PINNED``; a FAIL names its property and what it is: a
    ``FINDING`` (``finding``: its number in docs/atom/findings.md), a ``LEAD`` (ATOM's,
    reviewed, not a finding of its own) or an ``LMCACHE_LEAD`` (lmcache's own code,
    whose version the tier pins, so it fails on any ATOM checkout)."""

    verdict: Verdict = Verdict.PASS
    prop: Prop | None = None
    kind: str | None = None
    finding: int | None = None

    def line(self) -> str:
        """What ``kvfault list --tier atom`` says: ``FAIL correctness at ffdf3bb5d:
        finding 6``, ``PASS at ffdf3bb5d``."""
        if self.verdict == Verdict.PASS:
            return f"PASS at {PINNED}"
        what = f"finding {self.finding}" if self.kind == FINDING else str(self.kind)
        return f"FAIL {self.prop} at {PINNED}: {what}"


def _finding(number: int, prop: Prop) -> AtMain:
    return AtMain(Verdict.FAIL, prop, FINDING, number)


def _lead(prop: Prop, kind: str = LEAD) -> AtMain:
    return AtMain(Verdict.FAIL, prop, kind)


# The rows that FAIL at PINNED. A row not here PASSes there (a new row too: one that
# fails at ATOM's main goes here, and into findings.md only when it meets its standard).
FAILING: dict[str, AtMain] = {
    # 1: lookup pins leak whenever ATOM decides not to load a tier hit
    "reload_twice": _finding(1, Prop.RESOURCES),
    "resend_at_defaults": _finding(1, Prop.RESOURCES),
    # 2: a whole-prompt hit on a chunk-aligned prompt loads nothing;
    # unfull_chunk_aligned is it with LMCACHE_SAVE_UNFULL_CHUNK=True (the setting does
    # not change ATOM's path), not a lead of its own
    "chunk_aligned": _finding(2, Prop.EFFICIENCY),
    "unfull_chunk_aligned": _finding(2, Prop.EFFICIENCY),
    # 4: two servers on one host bind one lmcache lookup socket; dsv4_two_servers is
    # it on the hybrid connector, whose worker builds its lmcache metadata the same way
    "two_servers": _finding(4, Prop.IDENTITY),
    "dsv4_two_servers": _finding(4, Prop.IDENTITY),
    # 6: a TP server and a PP server of one model load each other's chunks
    "shared_tier_tp_pp": _finding(6, Prop.CORRECTNESS),
    # Reviewed leads. lost_hit_reply (low severity) is shared with lmcache: its
    # synchronous lookup client reports a timed-out lookup as 0 after the worker
    # pinned, with no cancel, and ATOM unpins only the hits it acts on (finding 1's
    # root). The picture rows (leads with caveats, docs/atom/tier.md, "Pictures"):
    # ATOM's HBM and lmcache keys are token ids, and a prefill its unaligned handoff
    # splits hands the picture to a forward without its placeholders; ATOM's merge
    # raises and the server stops.
    "lost_hit_reply": _lead(Prop.RESOURCES),
    # Lead 5 of findings.md (hardening, no fix proven): one retrieve that never answers
    # blocks every later load; hung_retrieve_later_batch is a load dispatched in a
    # later batch than the hung one.
    "hung_retrieve": _lead(Prop.LIVENESS),
    "hung_retrieve_later_batch": _lead(Prop.LIVENESS),
    # dsv4_hung_retrieve: hung_retrieve's fault on the hybrid connector, which runs
    # its loads on the same one-thread pool (_offload_common.py): the other load of
    # the hung one's batch waits. A later batch's load does not: the batch holds the
    # connector's one SLOT staging row, so later loads are refused (recomputed) and
    # no sidecar is saved (docs/atom/tier.md). Not a finding of its own.
    "dsv4_hung_retrieve": _lead(Prop.LIVENESS),
    # dsv4_hung_retrieve_later: the same fault, then later batches. The hung load never
    # ends (liveness); the later batch's load is refused at once for want of the one
    # SLOT staging row (recomputed: load_failures) and a prompt stored after the hang
    # is not loaded when resent (no sidecar stored, so efficiency counts nothing
    # loadable). A lead, for review;
    # not a finding: ATOM's offload README documents the refusal when no row is free
    # (and logs a warning for each refused load and sidecar save); what is new is only
    # that a load that never ends holds the row, lead 5's missing bound.
    "dsv4_hung_retrieve_later": _lead(Prop.LIVENESS),
    # A request preempted while it decodes, then re-prefilled: ATOM ends the prefill when
    # the prompt's KV is done (now_partial against num_prompt_tokens, scheduler.py:2113;
    # is_final_chunk likewise, :1391-1395), though a preempted request must re-forward its
    # outputs too (:1277-1283). A chunk ending at or past the prompt's end but short of
    # num_tokens has its sample appended as the next output, and the outputs' KV is never
    # recomputed. The resume after a tier load always makes such a chunk (it schedules the
    # rest of the prompt only, :1238); a budget-cut re-prefill without a load can too. The
    # tier shows one output replaced by its 0; a real model appends its prediction after the
    # prompt and decodes on over uncomputed KV. A lead (reviewed), no fix proven: :2113
    # against num_tokens passes both rows but is the change its comment warns against.
    "resume_preempted": _lead(Prop.CORRECTNESS),
    "dsv4_resume_preempted": _lead(Prop.CORRECTNESS),
    "two_images_partial": _lead(Prop.CORRECTNESS),
    "picture_handoff": _lead(Prop.CORRECTNESS),
    "picture_resend": _lead(Prop.CORRECTNESS),
    # lmcache 0.5.6's local disk backend never checks a read's length, so a file cut
    # short behind its back loads as a whole chunk: lmcache's, not an ATOM finding.
    "disk_truncated": _lead(Prop.CORRECTNESS, LMCACHE_LEAD),
    # The same read on the hybrid connector: the PAGE chunks alone cut (the sidecar
    # whole, so its CRC check passes) load as whole chunks, and ATOM takes lmcache's
    # mask for them. With every file cut (dsv4_disk_truncated) the sidecar's CRC fails
    # the load, and that row passes.
    "dsv4_disk_page_truncated": _lead(Prop.CORRECTNESS, LMCACHE_LEAD),
}

PASSES = AtMain()


def at_main(row: str) -> AtMain:
    """What ``row`` does at ``PINNED``."""
    return FAILING.get(row, PASSES)


def disagreement(row: str, verdict: str, detail: str, pinned: bool) -> str | None:
    """Why a campaign's ``verdict`` for ``row`` (its table's detail: a FAIL's starts
    with the property it names) disagrees with what the row declares, or None. At
    ``PINNED`` (``pinned``) every row gives its declared verdict, a FAIL naming its
    property. On another ATOM checkout a finding or an ATOM lead may also PASS (fixed
    there), never fail otherwise; every other row gives its declared verdict there too
    (an lmcache lead's FAIL is lmcache's, which the tier pins)."""
    want = at_main(row)
    if want.verdict == Verdict.PASS:
        return None if verdict == Verdict.PASS else f"{row}: {verdict} ({detail}), declared PASS"
    if verdict == Verdict.PASS and not pinned and want.kind != LMCACHE_LEAD:
        return None  # fixed in this checkout
    if verdict == Verdict.FAIL and detail.startswith(f"{want.prop}:"):
        return None
    return f"{row}: {verdict} ({detail}), declared {want.line()}"
