"""Generated workloads: a hypothesis strategy draws the whole story from the run's seed.

Prompt lengths around chunk and block boundaries (aligned, one token short or over, a
block short, anywhere), shared few-shot prefixes or prompts of their own, text or
pictures, block and chunk sizes, the state grid, one to three servers sharing one tier,
rounds that send prompts again to any server with restarts between them, and for dense
models sometimes an HBM pool small enough that admission waits and cached prefixes are
evicted. ``GENERATED`` runs in the default campaign over its seeds: the seed in a row
is the workload, so ``kvfault run --first-seed S --seeds 1 --scenario NAME`` replays a
failure, and ``cpu_tests/faults/scenarios/test_generated.py`` searches (and shrinks)
over the same strategy.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvfault.faults.properties.names import Prop
from kvfault.faults.runs import RunContext, RunResult, finishes
from kvfault.faults.scenarios.harness import _Run
from kvfault.faults.scenarios.scenario import _ONE_TIER, Scenario
from kvfault.reference.rules.keys import media_cache_seed
from kvfault.reference.stack.engine import EngineConfig
from kvfault.reference.types import Geometry, ModelKind, Request, StateGrid

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy


@dataclass(frozen=True)
class Prompt:
    length: int
    shared: bool  # a prefix of one long shared text, or a text of its own
    picture: bool  # carries a picture (its own bytes): a media cache seed
    steps_late: int = 0  # arrives this many 20 ms forwards into its round
    output: int = 4  # tokens it generates (how long it stays live)


@dataclass(frozen=True)
class Workload:
    """One generated story, plain data (a hypothesis draw shrinks toward small ones)."""

    model_kind: ModelKind
    geometry: Geometry
    state_grid: StateGrid
    servers: int
    pressure: bool  # dense only: an HBM pool of about two prompts
    prompts: tuple[Prompt, ...]
    # Each round sends every prompt to the server at its index; after a round, the
    # servers named restart (HBM gone, the tier kept).
    rounds: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]

    def describe(self) -> str:
        g = self.geometry
        return (
            f"{self.model_kind} {g.block_size}/{g.chunk_size}/{g.prefill_budget}/"
            f"{g.state_checkpoint_interval} grid={self.state_grid} servers={self.servers}"
            f"{' pressure' if self.pressure else ''} prompts="
            + ",".join(
                f"{p.length}{'s' if p.shared else ''}{'m' if p.picture else ''}"
                f"+{p.steps_late}/{p.output}"
                for p in self.prompts
            )
            + f" rounds={len(self.rounds)}"
        )


def workloads(model_kind: ModelKind | None = None) -> SearchStrategy[Workload]:
    """The strategy of generated workloads (``model_kind`` fixes the model)."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d: st.DrawFn) -> Workload:
        kind: ModelKind = (
            model_kind if model_kind is not None else d(st.sampled_from(["dense", "hybrid"]))
        )
        block = d(st.sampled_from([16, 32, 64, 128]))
        chunk = block * d(st.sampled_from([1, 2, 4]))
        interval = chunk * d(st.integers(1, 3))
        budget = max(d(st.sampled_from([chunk, 2 * chunk, 2048])), block)
        geometry = Geometry(block, chunk, budget, interval)
        grid: StateGrid = d(st.sampled_from(["block", "chunk"])) if kind == "hybrid" else "block"
        near = st.tuples(st.integers(1, 4), st.sampled_from([0, 0, -1, 1, -block, block])).map(
            lambda ke: max(1, ke[0] * chunk + ke[1])
        )
        length = st.one_of(near, st.integers(1, 4 * chunk + block))
        prompt = st.tuples(
            length,
            st.booleans(),
            st.sampled_from([False, True, False]),  # text twice as often: HBM prefixes
            st.integers(0, 3),
            st.sampled_from([4, 1, 16]),
        ).map(lambda t: Prompt(*t))
        prompts = tuple(d(st.lists(prompt, min_size=1, max_size=6)))
        servers = d(st.integers(1, 3))
        to = st.integers(0, servers - 1)
        rounds = d(
            st.lists(
                st.tuples(
                    st.tuples(*[to] * len(prompts)),
                    st.lists(to, max_size=servers, unique=True).map(lambda r: tuple(sorted(r))),
                ),
                min_size=2,
                max_size=3,
            )
        )
        pressure = kind == "dense" and d(st.booleans())
        return Workload(kind, geometry, grid, servers, pressure, prompts, tuple(rounds))

    return draw()


def draw_workload(seed: int, model_kind: ModelKind | None = None) -> Workload:
    """The workload of ``seed``: the strategy drawn from a random source seeded with it
    (the same seed, the same workload, under any PYTHONHASHSEED). One draw, with no
    search around it: ``@given`` costs half a second per call, this a millisecond, and
    the campaign draws once per run (hypothesis's own draw machinery, as ``@given``
    uses it for one example)."""
    from hypothesis.control import BuildContext
    from hypothesis.internal.conjecture.data import ConjectureData
    from hypothesis.internal.conjecture.providers import HypothesisProvider
    from hypothesis.internal.constants_ast import Constants

    class NoLocalConstants(HypothesisProvider):
        # hypothesis mixes constants read from the source of every local module loaded
        # into its draws (so a draw would depend on what this process imported) and
        # caches them under ./.hypothesis in the user's directory: neither, here.
        _local_constants = Constants()

    data = ConjectureData(
        random=random.Random(f"generated/{model_kind}/{seed}"), provider=NoLocalConstants
    )
    with BuildContext(data, is_final=True, wrapped_test=draw_workload):
        return data.draw(workloads(model_kind))


def run_workload(ctx: RunContext, name: str, w: Workload) -> RunResult:
    """Run a generated workload: its servers share one tier on one host."""
    bs = w.geometry.block_size
    longest = max(p.length for p in w.prompts)
    config = EngineConfig(
        geometry=w.geometry,
        model_kind=w.model_kind,
        state_grid=w.state_grid,
        # Under pressure: room for one and a half of the longest prompts (never less
        # than one): admission waits, freed blocks are recycled, cached prefixes evicted.
        num_blocks=(3 * (-(-longest // bs))) // 2 + 1 if w.pressure else 16384,
    )
    run = _Run(name, ctx, config)
    rng = random.Random(f"generated-ids/{ctx.seed}")
    base = tuple(rng.randrange(1000, 151_000) for _ in range(longest))
    reqs = []
    for p in w.prompts:
        ids = (
            base[: p.length]
            if p.shared
            else tuple(rng.randrange(1000, 151_000) for _ in range(p.length))
        )
        media = (rng.randbytes(64),) if p.picture else ()
        rid = f"chatcmpl-{rng.getrandbits(128):032x}"
        reqs.append(Request(rid, ids, cache_seed=media_cache_seed(media), media=media))
    engines = [run.engine(f"S{k + 1}") for k in range(w.servers)]
    clock = run.world.clock
    for r, (targets, restarts) in enumerate(w.rounds):
        for k, engine in enumerate(engines):
            t0 = clock.now()
            mine = [
                Request(
                    f"{q.req_id}-r{r}",
                    q.prompt_token_ids,
                    q.cache_seed,
                    q.media,
                    p.output,
                    t0 + 0.02 * p.steps_late,
                )
                for q, p, to in zip(reqs, w.prompts, targets, strict=True)
                if to == k
            ]
            if mine:
                run.submit(engine, mine)
                run.run(engine)
            if run.stopped():
                return run.result()
        for k in restarts:
            engines[k].restart()
    run.notes["workload"] = w.describe()
    return run.result()


def generated_dense(ctx: RunContext) -> RunResult:
    """A dense workload drawn from the seed (see the module docstring)."""
    return run_workload(ctx, "generated_dense", draw_workload(ctx.seed, "dense"))


def generated_hybrid(ctx: RunContext) -> RunResult:
    """A hybrid workload drawn from the seed (see the module docstring)."""
    return run_workload(ctx, "generated_hybrid", draw_workload(ctx.seed, "hybrid"))


GENERATED: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "generated_dense",
            "a hypothesis-drawn dense workload from the seed: lengths around chunk edges, media, 1-3 servers, restarts, HBM pressure",
            generated_dense,
            (*_ONE_TIER, Prop.HYBRID),
            expect=finishes(),
        ),
        Scenario(
            "generated_hybrid",
            "a hypothesis-drawn hybrid workload from the seed: lengths around chunk edges, media, grids, 1-3 servers, restarts",
            generated_hybrid,
            (*_ONE_TIER, Prop.GRID, Prop.HYBRID),
            expect=finishes(),
        ),
    )
}
