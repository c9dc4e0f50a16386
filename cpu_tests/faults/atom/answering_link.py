"""A fake worker link for the scheduler's polls of its workers (``WorkerLink``'s
``call`` and ``each``): it answers one method only, with one answer a call, the last
one from then on, and counts the calls."""

from __future__ import annotations


class AnsweringLink:
    """Answers ``method`` with ``answers`` in turn, repeating the last one."""

    def __init__(self, method: str, *answers: int | None):
        self.method, self.answers, self.calls = method, list(answers), 0

    def call(self, name: str, *args: object) -> int | None:
        assert name == self.method
        self.calls += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def each(self, name: str, *args: object) -> list[int | None]:
        return [self.call(name, *args)]
