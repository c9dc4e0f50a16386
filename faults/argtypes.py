"""argparse value types shared by the CLI and the pytest plugin: one clear message each."""

from __future__ import annotations

import argparse
from typing import Callable


def number_at_least(minimum: float, what: str, kind: type = int) -> Callable[[str], float]:
    """A ``type=`` for argparse: ``kind(text)``, refused below ``minimum`` with a line
    naming ``what``."""
    noun = "a whole number" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} wants {noun}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{what} must be at least {minimum}, got {text}")
        return value

    return parse


seed_count = number_at_least(1, "a seed count")
seed = number_at_least(0, "a seed")
timeout_seconds = number_at_least(0, "--timeout (seconds, 0: none)", float)
