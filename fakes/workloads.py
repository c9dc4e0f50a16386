"""Workload generators: faker-made prompts, pictures and request ids, all from one seed.

A toy tokenizer maps words to stable ids (blake2b, not ``hash``, so ids do not depend on
PYTHONHASHSEED). Request ids look like real engines' (``chatcmpl-<uuid4>``): set
iteration order over them does depend on PYTHONHASHSEED, which is the point.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from kvfault.reference.rules.keys import media_cache_seed
from kvfault.reference.types import Request

if TYPE_CHECKING:  # faker is imported lazily: a sweep's subprocess may never need it
    from faker import Faker

VOCAB_BASE = 1000
VOCAB_SIZE = 150_000
IMAGE_PLACEHOLDER_ID = 151_655  # the same id for every picture, as in real engines


def _faker(seed: int) -> Faker:
    from faker import Faker

    fk = Faker("en_US")
    fk.seed_instance(seed)
    return fk


@functools.lru_cache(maxsize=65536)  # prompts reuse a small vocabulary
def token_id(word: str) -> int:
    digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
    return VOCAB_BASE + int.from_bytes(digest, "little") % VOCAB_SIZE


# Below this many draws numpy's start-up per call costs more than it saves.
_NUMPY_PICKS = 4096


def picks(rng: random.Random, population: Sequence[int], k: int) -> tuple[int, ...]:
    """``tuple(rng.choices(population, k=k))``: the same values, and ``rng`` left in the
    same state. Large draws go through numpy's MT19937 when numpy is installed: it is
    the same generator as ``random.Random`` and makes its doubles the same way, so
    ``floor(random() * n)`` gives the same indices (a test compares both paths)."""
    return tuple(_picks(rng, population, k))


def _picks(rng: random.Random, population: Sequence[int], k: int) -> list[int]:
    if k < _NUMPY_PICKS:
        return rng.choices(population, k=k)
    try:
        import numpy as np
    except ImportError:  # numpy is optional: the plain draw is only slower
        return rng.choices(population, k=k)
    version, internal, gauss = rng.getstate()
    mt = np.random.RandomState()
    mt.set_state(("MT19937", np.array(internal[:-1], dtype=np.uint32), internal[-1]))
    doubles = mt.random_sample(k)
    _, key, pos, *_ = mt.get_state()
    rng.setstate((version, (*key.tolist(), pos), gauss))
    # random.choices: population[floor(random() * float(n))]; the doubles are >= 0, so
    # truncation is floor.
    index = (doubles * float(len(population))).astype(np.intp)
    # An object array holds the population's own ints: taking from it makes none.
    return np.array(population, dtype=object)[index].tolist()


def tokenize(text: str) -> tuple[int, ...]:
    return tuple(token_id(w) for w in text.split())


def fit(
    ids: tuple[int, ...], length: int, filler: Callable[[int], tuple[int, ...]]
) -> tuple[int, ...]:
    """Pad with ``filler`` ids, or cut, to exactly ``length`` ids."""
    if len(ids) < length:
        ids += filler(length - len(ids))
    return ids[:length]


@dataclass
class Workload:
    """Requests in submission order, with the seed that made them."""

    name: str
    seed: int
    requests: list[Request]


_Gen = TypeVar("_Gen", bound=Callable[..., Workload])
_DRAWN: OrderedDict[Any, tuple[Workload, Any, Any]] = OrderedDict()
_DRAWN_KEPT = 16


def _redrawn(method: _Gen) -> _Gen:
    """Same seed, same draws: a generator called again from the same generator state
    (a determinism re-run, the legacy and fixed sides of a regression) returns the
    workload it drew before and leaves ``rng`` and faker where drawing would have."""

    @functools.wraps(method)
    def draw(self: Workloads, *args: Any, **kwargs: Any) -> Workload:
        key = (
            method.__name__,
            self.seed,
            args,
            tuple(sorted(kwargs.items())),
            self.rng.getstate(),
            self.fk.random.getstate(),
        )
        if key in _DRAWN:
            _DRAWN.move_to_end(key)
            out, rng_state, fk_state = _DRAWN[key]
            self.rng.setstate(rng_state)
            self.fk.random.setstate(fk_state)
        else:
            out = method(self, *args, **kwargs)
            _DRAWN[key] = (out, self.rng.getstate(), self.fk.random.getstate())
            if len(_DRAWN) > _DRAWN_KEPT:
                _DRAWN.popitem(last=False)
        return replace(out, requests=list(out.requests))

    return draw  # type: ignore[return-value]  # functools.wraps: method's own signature


class Workloads:
    """All generators draw from one seed: same seed, same workload."""

    def __init__(self, seed: int):
        self.seed = seed
        self.fk = _faker(seed)
        self.rng = random.Random(seed)
        # Faker's words, drawn once; long prompts are sampled from them (faker's own
        # paragraph generator is too slow for 100k-token workloads).
        self._vocab = [token_id(w) for w in self.fk.words(nb=2000)]

    def words(self, n: int) -> tuple[int, ...]:
        return picks(self.rng, self._vocab, n)

    def request_id(self) -> str:
        return f"chatcmpl-{self.fk.uuid4()}"

    def _qa(self) -> str:
        a, b = self.rng.randrange(2, 99), self.rng.randrange(2, 99)
        name = self.fk.first_name()
        item = self.fk.word()
        return (
            f"Question: {name} has {a} {item}s and buys {b} more. "
            f"How many {item}s does {name} have? {self.fk.sentence(nb_words=12)} "
            f"Answer: {name} has {a} + {b} = {a + b} {item}s. The answer is {a + b}."
        )

    @_redrawn
    def gsm8k_fewshot(
        self,
        n: int,
        shots: int = 8,
        prefix_tokens: int = 1536,
        question_tokens: tuple[int, int] = (40, 400),
    ) -> Workload:
        """GSM8K-like prompts: a long shared few-shot prefix, then one question each."""
        prefix = fit(
            tokenize(" ".join(self._qa() for _ in range(shots))), prefix_tokens, self.words
        )
        reqs = []
        for _ in range(n):
            q = fit(tokenize(self._qa()), self.rng.randrange(*question_tokens), self.words)
            reqs.append(Request(self.request_id(), prefix + q, max_output_tokens=4))
        return Workload("gsm8k_fewshot", self.seed, reqs)

    def picture(self, size: int = 4096) -> bytes:
        return self.rng.randbytes(size)

    @_redrawn
    def multimodal_same_text(
        self, n_images: int = 2, text_tokens: int = 300, image_tokens: int = 576
    ) -> Workload:
        """Requests with identical token ids (same text, same placeholders) and
        different pictures."""
        text = fit(tokenize(self.fk.paragraph(nb_sentences=10)), text_tokens, self.words)
        ids = (
            text[: text_tokens // 2]
            + (IMAGE_PLACEHOLDER_ID,) * image_tokens
            + text[text_tokens // 2 :]
        )
        reqs = []
        for _ in range(n_images):
            media = (self.picture(),)
            reqs.append(
                Request(self.request_id(), ids, cache_seed=media_cache_seed(media), media=media)
            )
        return Workload("multimodal_same_text", self.seed, reqs)

    def prompt(self, length: int) -> tuple[int, ...]:
        return fit(tokenize(self.fk.sentence(nb_words=16)), length, self.words)

    @_redrawn
    def chunk_aligned(self, length: int = 2048) -> Workload:
        return Workload(
            "chunk_aligned", self.seed, [Request(self.request_id(), self.prompt(length))]
        )

    @_redrawn
    def burst(self, n: int = 64, length: int = 1024, arrival_time: float = 0.0) -> Workload:
        """``n`` distinct prompts arriving together (a restart burst)."""
        # What ``self.prompt(length)`` per request draws, in the same order, with the
        # fillers of every prompt drawn at once (faker and ``rng`` are separate streams).
        heads = []
        for _ in range(n):
            req_id = self.request_id()
            heads.append((req_id, tokenize(self.fk.sentence(nb_words=16))[:length]))
        filler = _picks(self.rng, self._vocab, sum(length - len(ids) for _, ids in heads))
        reqs = []
        at = 0
        for req_id, ids in heads:
            need = length - len(ids)
            prompt = ids + tuple(filler[at : at + need])
            reqs.append(Request(req_id, prompt, arrival_time=arrival_time))
            at += need
        return Workload("burst", self.seed, reqs)


def resend(req: Request, req_id: str, arrival_time: float = 0.0) -> Request:
    """The same prompt (and media) under a new request id."""
    return replace(req, req_id=req_id, arrival_time=arrival_time)
