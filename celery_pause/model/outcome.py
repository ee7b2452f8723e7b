"""What one attempt of a change decided: the next value, and what the caller learns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")
R = TypeVar("R")


@dataclass(frozen=True)
class Outcome(Generic[V, R]):
    """The value to write (``None``: leave it as it is) and the result of the attempt.

    A store may run a change more than once (on contention); the result of the
    attempt that committed is the one the caller gets back, so a change never
    leaks what it found through a list the caller must clear.
    """

    value: V | None
    result: R
