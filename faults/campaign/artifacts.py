"""Replay artifacts: one small JSON file per case naming its target, scenario, seed,
regression or fault plan, and the one command that replays it. The one writer
(``write_artifact``, also ``stage_artifact`` for campaign cases) and the one reader
(``read_artifact``) of the format. An artifact is written *before* its case runs, whole
or not at all, so a crash or a hang still leaves it behind."""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, TypeVar

from kvfault.faults.argtypes import MAX_SEED, MAX_TIMEOUT_S
from kvfault.faults.campaign.kinds import kind_of
from kvfault.faults.campaign.outcomes import CaseOutcome
from kvfault.faults.campaign.reading import target_from_json
from kvfault.faults.campaign.targets import CampaignError, Case
from kvfault.faults.errors import KvfaultError
from kvfault.faults.injectors.plans import FaultPlan
from kvfault.faults.provenance import Code, of_target
from kvfault.faults.safe_io import NotARegularFile, locked_dir, read_bounded, write_atomic
from kvfault.faults.tiers import Tiers, default_tier

T = TypeVar("T")

ARTIFACT_VERSION = 1
DEFAULT_ARTIFACT_DIR = Path(".kvfault") / "artifacts"


# Limits shared with the command line (faults.argtypes.MAX_SEED: what --seed takes); a
# hash seed is what PYTHONHASHSEED takes; an artifact is a few hundred bytes.
MAX_HASHSEED = 4294967295
MAX_ARTIFACT_BYTES = 1 << 20


class ArtifactError(KvfaultError, ValueError):
    """A replay artifact that cannot be read or names nothing this version knows."""


def artifact_dir(explicit: Path | None = None) -> Path:
    """Where artifacts go: ``explicit``, else ``$KVFAULT_ARTIFACTS``, else
    ``.kvfault/artifacts`` under the current directory."""
    if explicit is not None:
        return explicit
    env = os.environ.get("KVFAULT_ARTIFACTS")
    return Path(env) if env else DEFAULT_ARTIFACT_DIR


def hashseed() -> str | None:
    """This process's PYTHONHASHSEED as a plain number (Python also takes `` 0`` and
    ``+5``), or None when hash randomisation is random."""
    value = os.environ.get("PYTHONHASHSEED")
    if value in (None, "", "random"):
        return None
    try:
        return str(int(value))
    except ValueError:  # not one Python starts with: left for the caller to refuse
        return value


def case_hashseed(case: Case) -> str | None:
    """The PYTHONHASHSEED that matters for ``case``'s replay: this process's, unless the
    case's tier runs its code under test under the row's own hash seed
    (``Tier.own_hash_seeds``: the seed in its command line is every process's), then
    None."""
    if Tiers.installed()[case.target.tier].own_hash_seeds:
        return None
    return hashseed()


def case_code(case: Case) -> Code | None:
    """The engine checkout ``case`` runs (``kvfault.faults.provenance.of_target``): its absolute
    path, commit and whether its tree is dirty; None for kvfault's own stack."""
    return of_target(case.target.tier, case.target.options)


def replay_command(case: Case, timeout_s: float | None = None) -> str:
    """The case's command, prefixed with the PYTHONHASHSEED it ran under where that
    matters (hash order can, e.g. for the restart-numbering regression), with the
    ``--timeout`` it ran past, if it did (``CaseOutcome.timeout_s``), and, for an
    engine checkout, a trailing shell comment naming the commit it ran and whether the
    tree was dirty (``# ENGINE 0123456789ab (clean)``)."""
    command = case.command
    if timeout_s is not None:
        # The shortest text of this very number (repr), without a whole number's ".0".
        whole = float(timeout_s).is_integer()
        command += f" --timeout {int(timeout_s) if whole else repr(float(timeout_s))}"
    hs = case_hashseed(case)
    command = f"PYTHONHASHSEED={hs} {command}" if hs is not None else command
    code = case_code(case)
    if code is not None:
        state = {True: " (dirty tree)", False: " (clean)", None: ""}[code.dirty]
        command += (
            f"  # {code.engine} {code.commit[:12] if code.commit else 'no git commit'}{state}"
        )
    return command


def artifact_json(
    case: Case, path: Path | None = None, timeout_s: float | None = None
) -> dict[str, Any]:
    """What ``case``'s artifact at ``path`` holds; ``timeout_s``: the ``--timeout`` it
    ran past, which its replay applies too."""
    plan = case.plan()
    code = case_code(case)
    return {
        **({"code": code.as_json()} if code is not None else {}),
        "kvfault_artifact": ARTIFACT_VERSION,
        "case": case.id,
        "target": case.target.as_json(),
        "scenario": case.target.scenario,
        "seed": case.seed,
        "regression": case.target.regression,
        "plan": plan.as_json() if plan is not None else None,
        "pythonhashseed": case_hashseed(case),
        "timeout_s": timeout_s,
        "command": replay_command(case, timeout_s),
        "replay": f"kvfault replay {path}" if path is not None else None,
    }


def artifact_path(case: Case, directory: Path) -> Path:
    """Where ``case``'s artifact lives in ``directory`` (one file per case: the same
    case on another tier is another case, with its own file)."""
    t = case.target
    at = f"-x{t.scale}" if t.scale != 1 else ""
    at += f"-legacy-{t.stack}" if t.stack else ""  # not the fixed stack's case
    tier = f"{t.tier}-" if t.tier != default_tier() else ""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{tier}{t.kind.name}-{t.name}{at}-seed{case.seed}")
    return directory / f"{stem}.json"


# While campaign runs are running a case, its artifact says how many ("campaign_runs"):
# the last of them to pass removes it, a failing one rewrites it without the field (kept).
# An artifact without the field was kept or written by another command (`kvfault repro`
# printed its replay line to a reviewer): no campaign run removes or rewrites it on a pass.
RUNS_FIELD = "campaign_runs"


def _dump(obj: dict[str, Any]) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def _in_directory(directory: Path, write: Callable[[], T]) -> T:
    """Run ``write`` in ``directory`` (created if needed) under the directory's lock.
    A concurrent campaign may remove the directory when it empties (``tidy``) between
    our mkdir and our write: then make it again (bounded)."""
    for attempt in range(5):
        directory.mkdir(parents=True, exist_ok=True)
        try:
            with locked_dir(directory):
                return write()
        except FileNotFoundError:
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


def _current(path: Path) -> dict[str, Any] | None:
    """The artifact at ``path`` as JSON, or None when there is none (or garbage, or a
    link, or something too big: all replaced by the next write)."""
    try:
        raw = read_bounded(path, MAX_ARTIFACT_BYTES, follow=False)
        obj = json.loads(raw) if len(raw) <= MAX_ARTIFACT_BYTES else None
    except (OSError, ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) and "kvfault_artifact" in obj else None


def _runs(obj: dict[str, Any] | None) -> int:
    runs = obj.get(RUNS_FIELD) if obj is not None else None
    return runs if isinstance(runs, int) and not isinstance(runs, bool) and runs > 0 else 0


def write_artifact(case: Case, directory: Path, timeout_s: float | None = None) -> Path:
    """Write ``case``'s replay artifact into ``directory`` (created if needed) and
    return its path (``timeout_s``: the ``--timeout`` the case ran past). The file
    appears whole or not at all, through a private temporary file
    (``kvfault.faults.safe_io.write_atomic``); any number of processes may write into one
    directory at once."""
    path = artifact_path(case, directory)
    obj = artifact_json(case, path, timeout_s)
    return _in_directory(directory, lambda: write_atomic(path, _dump(obj)))


def stage_artifact(case: Case, directory: Path) -> tuple[Path, bytes | None]:
    """``write_artifact`` for a campaign case, undone by ``drop_artifact`` when the case
    passes and made permanent by ``keep_artifact`` when it does not. Returns the path and
    the bytes of an artifact that was there already and stays as it is (another
    command's, or one a failing run kept; None when this call wrote the file). Safe
    beside other processes staging the same case in the same directory."""
    path = artifact_path(case, directory)

    def stage() -> tuple[Path, bytes | None]:
        now = _current(path)
        if now is not None and _runs(now) == 0:
            return path, _dump(now).encode()
        obj = artifact_json(case, path)
        obj[RUNS_FIELD] = _runs(now) + 1
        write_atomic(path, _dump(obj))
        return path, None

    return _in_directory(directory, stage)


def drop_artifact(path: Path, previous: bytes | None) -> None:
    """Undo ``stage_artifact`` after a pass: the last campaign run of the case removes
    the artifact; an artifact that was there before, or that a failing run kept, stays."""
    if previous is not None:
        return

    def drop() -> None:
        now = _current(path)
        runs = _runs(now)
        if now is None or runs == 0:
            return
        if runs == 1:
            path.unlink(missing_ok=True)
        else:
            write_atomic(path, _dump({**now, RUNS_FIELD: runs - 1}))

    with contextlib.suppress(FileNotFoundError):  # the directory went: nothing to undo
        with locked_dir(path.parent):
            drop()


def keep_artifact(case: Case, directory: Path, timeout_s: float | None = None) -> Path:
    """A case that did not pass keeps its artifact, for good (no campaign run removes
    it): written again without the count of running campaign runs, and with the
    ``--timeout`` it ran past, if it did."""
    return write_artifact(case, directory, timeout_s)


_ABSENT = object()


def _whole(value: object) -> bool:
    return type(value) is int  # not True, not 1.0


def _hash_seed(value: object) -> bool:
    return (
        isinstance(value, (int, str))
        and not isinstance(value, bool)
        and re.fullmatch(r"[0-9]+", str(value)) is not None  # ASCII: what Python reads
        and int(value) <= MAX_HASHSEED
    )


def _seconds(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and 0 < value <= MAX_TIMEOUT_S
    )


# The artifact's scalar fields: (field, whether a value is valid, what a valid one is).
# _ABSENT: the field is missing. The limits are the command line's (faults.argtypes).
_FIELD_RULES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("seed", lambda v: _whole(v) and 0 <= v <= MAX_SEED, f"a whole number from 0 to {MAX_SEED}"),
    ("pythonhashseed", lambda v: v is _ABSENT or v is None or _hash_seed(v),
     f"null or a whole number from 0 to {MAX_HASHSEED} (what PYTHONHASHSEED accepts)"),
    (RUNS_FIELD, lambda v: v is _ABSENT or (_whole(v) and v > 0), "a whole number above 0"),
    ("timeout_s", lambda v: v is _ABSENT or v is None or _seconds(v),
     f"null or a number of seconds above 0 and at most {MAX_TIMEOUT_S:g} (what --timeout takes)"),
)  # fmt: skip


def read_artifact(path: Path) -> tuple[Case, dict[str, Any]]:
    """Read an artifact back into the case it names; raises ``ArtifactError`` with one
    clear line for anything malformed."""
    try:
        raw = read_bounded(path, MAX_ARTIFACT_BYTES)
    except NotARegularFile as exc:
        raise ArtifactError(f"cannot read {path}: {exc.strerror}") from None
    except OSError as exc:
        raise ArtifactError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_ARTIFACT_BYTES:
        raise ArtifactError(
            f"{path} is over {MAX_ARTIFACT_BYTES} bytes; an artifact is a few hundred"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(
            f"{path} is not UTF-8 text (byte {exc.start}): not a replay artifact"
        ) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ArtifactError(f"{path} nests JSON too deeply: not a replay artifact") from None
    except ValueError as exc:  # a number past Python's digit limit for int()
        raise ArtifactError(f"{path} holds a number too long to read ({exc})") from None
    if not isinstance(obj, dict) or "kvfault_artifact" not in obj:
        raise ArtifactError(
            f"{path} is not a kvfault replay artifact (no 'kvfault_artifact' field)"
        )
    version = obj["kvfault_artifact"]
    if type(version) is not int or version != ARTIFACT_VERSION:  # not True, not 1.0
        raise ArtifactError(
            f"{path}: artifact version {obj['kvfault_artifact']!r}; this kvfault reads {ARTIFACT_VERSION}"
        )
    for field, valid, what in _FIELD_RULES:
        if not valid(obj.get(field, _ABSENT)):
            raise ArtifactError(f"{path}: {field!r} must be {what}, got {obj.get(field)!r}")
    seed, recorded = obj["seed"], obj.get("pythonhashseed")
    if recorded is not None:
        obj["pythonhashseed"] = str(int(recorded))  # "007" is seed 7
    try:
        target = target_from_json(obj.get("target"))
        plan = None
        if obj.get("plan") is not None and kind_of(target).replays_plan:
            plan = FaultPlan.from_json(obj["plan"])
    except (CampaignError, ValueError, TypeError, KeyError, RecursionError) as exc:
        raise ArtifactError(f"{path}: {exc}") from None
    if plan is not None and (plan.seed, plan.scale) != (seed, target.scale):
        raise ArtifactError(
            f"{path}: its plan has seed {plan.seed} and scale {plan.scale} but the case has "
            f"seed {seed} and scale {target.scale}; an artifact is replayed as written or "
            "not at all"
        )
    if "code" in obj:
        try:
            Code.from_json(obj["code"])
        except ValueError as exc:
            raise ArtifactError(f"{path}: {exc}") from None
    case = Case(target, seed, recorded=plan)
    why = _not_as_written(obj, case)
    if why:
        raise ArtifactError(f"{path}: {why}; an artifact is replayed as written or not at all")
    return case, obj


def _not_as_written(obj: dict[str, Any], case: Case) -> str:
    """What in ``obj`` the case it replays would not have written (an unknown field, a
    target field the target ignores, a copy that disagrees with it), or ""."""
    written = artifact_json(case)
    # "code" is what ran then, not what the case would write now (a replay compares).
    unknown = sorted(set(obj) - set(written) - {RUNS_FIELD, "code"})
    if unknown:
        return f"unknown field {unknown[0]!r}"
    given, rebuilt = obj["target"], written["target"]
    for key in sorted(given):
        if key not in rebuilt:
            return f"target field {key!r} is not one a target has"
        if given[key] != rebuilt[key]:
            return f"target {key!r} is {given[key]!r} but the target it names has {rebuilt[key]!r}"
    # The top-level copies of what the target and seed make: each, where present, agrees.
    made_by = {"scenario": "its target runs", "case": "its target and seed make",
               "regression": "its target runs"}  # fmt: skip
    for key, maker in made_by.items():
        if key in obj and obj[key] != written[key]:
            return f"{key!r} is {obj[key]!r} but {maker} {written[key]!r}"
    if obj.get("plan") is not None and case.recorded is None:
        plan = case.plan()
        if plan is None or obj["plan"] != plan.as_json():
            return "'plan' is not the plan its target makes (this kind of target replays none)"
    return ""


class CampaignArtifacts:
    """A campaign's artifacts: each case's is written before it runs and kept only if
    the case did not pass (so a crash or hang leaves it, and a green campaign leaves
    nothing, not even the directories it made; an artifact another command wrote for
    the same case stays). ``keep_passing``: a passing case keeps its artifact too
    (``kvfault repro``: the reviewer is handed its replay line either way)."""

    def __init__(self, directory: Path, keep_passing: bool = False):
        self.directory, self.keep_passing = directory, keep_passing
        self.kept: dict[str, Path] = {}
        # The directories this run will create (the missing tail of the path), deepest
        # first: only those are removed again.
        missing = [d for d in (directory, *directory.parents) if not d.exists()]
        if directory == DEFAULT_ARTIFACT_DIR:
            # kvfault's own default place: whichever of several concurrent campaigns
            # made it, the last one to finish removes it when it stayed empty.
            missing = [directory, directory.parent]
        self._created = missing

    def before(self, case: Case) -> tuple[Path, bytes | None]:
        return stage_artifact(case, self.directory)

    def after(
        self, case: Case, outcome: CaseOutcome, staged: tuple[Path, bytes | None] | None
    ) -> None:
        """Drop the staged artifact of a case that passed; keep (write again) that of
        one that did not. ``staged`` None: the case ran where this process staged
        nothing (a worker on another host), so only a failing case's is written."""
        if outcome.ok and not self.keep_passing:
            if staged is not None:
                drop_artifact(*staged)  # an artifact `kvfault repro` wrote stays
        else:
            self.kept[case.id] = keep_artifact(case, self.directory, outcome.timeout_s)

    def abandon(self, staged: tuple[Path, bytes | None]) -> None:
        """Undo the staging of a case that will have no outcome (the campaign was
        interrupted): as a pass's, the last campaign run of the case removes it."""
        drop_artifact(*staged)

    def tidy(self) -> None:
        """Remove the directories this run created when they stayed empty."""
        for d in self._created:
            try:
                d.rmdir()
            except OSError:
                break
