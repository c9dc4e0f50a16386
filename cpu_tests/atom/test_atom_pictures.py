"""The atom tier's picture rows (docs/atom/tier.md, "multimodal") judge ATOM, not the
fake forward: bugs planted by hand in a scratch clone of ATOM's scheduler (one line
each) fail the rows that pass on the checkout as it is, and the two leads at ATOM's
main (``two_images_partial``, ``picture_handoff``) fail ``correctness`` there (ATOM's
merge raises, the server stops); ``two_images_partial`` passes with its candidate fix
(``--atom-fix``), ``picture_handoff`` answers right with its fix and gives up the
tier's part (efficiency), and its fix leaves ``two_images_partial`` a crash, never a
wrong answer; the third (``picture_resend``) answers right with its fix and gives up
a reuse.

- A batch that never takes a request's picture (``ScheduledBatch`` drops
  ``multimodal_data``): ATOM's runner embeds the placeholder ids as they are, and the
  picture's KV is not its cold run's (``picture_tier_suffix``, ``picture_hbm_suffix``).
- A request parked for its tier load loses its picture: the suffix computed after the
  load has none (``picture_tier_suffix``; ``picture_hbm_suffix`` loads nothing and
  passes)."""

from __future__ import annotations

from atom_planted import planted

from kvfault.faults.atom import catalog
from kvfault.faults.atom.executor import atom_executor
from kvfault.faults.campaign.execute import run_case

SCHEDULER = "atom/model_engine/scheduler.py"
NEVER_HANDED = (
    "                self.multimodal_data[seq.id] = seq.multimodal_data\n",
    "                pass\n",
)
DROPPED_AT_PARK = (
    "        seq.status = SequenceStatus.WAITING_FOR_REMOTE_KVS\n        self._count_inflight_load(seq)\n",
    "        seq.status = SequenceStatus.WAITING_FOR_REMOTE_KVS\n        seq.multimodal_data = None\n"
    "        self._count_inflight_load(seq)\n",
)
PASSING = ["picture_tier_suffix", "picture_hbm_suffix"]
LEADS = ["two_images_partial", "picture_handoff"]


def _violations(src: str, rows: list[str], fixes: list[str] | None = None) -> dict[str, list[str]]:
    out = {}
    with atom_executor(src, atom_fix=fixes) as executor:
        for name in rows:
            row = catalog.ROWS[name]
            res = run_case(row.scenario, 0, executor=executor)
            out[name] = [f"{v.prop}: {v.message}" for v in res.violations]
    return out


def test_a_batch_without_the_picture_fails_correctness(atom_src, tmp_path):
    src = planted(atom_src, tmp_path / "atom", NEVER_HANDED, file=SCHEDULER)
    found = _violations(src, PASSING)
    for name in PASSING:
        assert any(v.startswith("correctness:") for v in found[name]), (name, found[name])


def test_a_park_that_drops_the_picture_fails_the_tier_row(atom_src, tmp_path):
    src = planted(atom_src, tmp_path / "atom", DROPPED_AT_PARK, file=SCHEDULER)
    found = _violations(src, PASSING)
    assert any(v.startswith("correctness:") for v in found["picture_tier_suffix"]), found
    assert found["picture_hbm_suffix"] == [], found


def test_the_checkout_as_it_is(atom_src):
    found = _violations(atom_src, PASSING + LEADS)
    assert {n: found[n] for n in PASSING} == {n: [] for n in PASSING}
    # Picture X's chunk restored for picture Y, then ATOM's merge raises; the handoff's
    # first forward takes the picture without its placeholders: ATOM's merge raises.
    assert "correctness: restored pages differ from recompute" in found["two_images_partial"]
    assert "correctness: 1 requests never answered, e.g. again" in found["picture_handoff"]


def test_the_lmcache_lead_passes_with_its_fix(atom_src):
    fixed = _violations(atom_src, ["two_images_partial"], fixes=["two_images_partial"])
    assert fixed == {"two_images_partial": []}


def test_the_handoff_fix_answers_right_and_never_hides_a_wrong_picture(atom_src):
    """Declining the unaligned handoff for a request with a picture: ``picture_handoff``
    answers right and recomputes the tier's part (efficiency; with ``reload_twice``'s
    fix, whose leaked pin this declined lookup also leaves, nothing else). On
    ``two_images_partial`` (no handoff there) it changes nothing: the restored chunk
    holds the other picture's KV and ATOM's merge still raises, a stop, never an answer
    computed on the wrong picture (what a fix that withholds the picture from the
    batch gave: "output of cat differs from its cold run")."""
    found = _violations(atom_src, LEADS, fixes=["picture_handoff"])
    assert [v.split(":")[0] for v in found["picture_handoff"]] == ["efficiency", "resources"]
    assert "again claims 0 tokens of a 256-token tier hit" in found["picture_handoff"][0]
    assert found["two_images_partial"] == [
        "correctness: restored pages differ from recompute",
        "correctness: 1 requests never answered, e.g. cat",
    ]
    both = _violations(atom_src, ["picture_handoff"], fixes=["picture_handoff", "reload_twice"])
    assert [v.split(":")[0] for v in both["picture_handoff"]] == ["efficiency"], both


def test_a_resent_picture_stops_the_server_and_its_fix_gives_up_the_reuse(atom_src):
    """ATOM's HBM prefix cache (its default) on a resent prompt with the same picture:
    the hit covers the placeholders, ATOM's merge raises and the server stops. Hits
    cut before the picture (HBM and lmcache) answer right, and recompute the picture's
    chunk the tier holds (efficiency): ATOM's runner cannot merge part of a picture."""
    assert _violations(atom_src, ["picture_resend"])["picture_resend"] == [
        "correctness: 1 requests never answered, e.g. again"
    ]
    # With reload_twice's fix too: the cut lookup's hit is then no more than HBM's,
    # and ATOM's clearing of such a lookup leaves its pin (finding reload_twice).
    fixes = ["picture_resend", "two_images_partial", "reload_twice"]
    fixed = _violations(atom_src, ["picture_resend"], fixes)
    assert [v.split(":")[0] for v in fixed["picture_resend"]] == ["efficiency"], fixed
    assert "silent miss: again hit 128 tokens" in fixed["picture_resend"][0]
