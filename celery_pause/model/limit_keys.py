"""The store keys of a limit's records, and the label value a partition's record keeps."""

from __future__ import annotations

import hashlib
from typing import TypeVar

from .limit import Record
from .outcome import Outcome

R = TypeVar("R")


def tagged(outcome: Outcome[Record, R], value: str | None) -> Outcome[Record, R]:
    """``outcome`` with the label value of its partition kept in the record it writes
    (``of``: what a status shows of the partition), unless it deletes the record."""
    if value is None or not outcome.value:
        return outcome
    return Outcome({**outcome.value, "of": value}, outcome.result)


def partition_id(hold_id: str, value: str) -> str:
    """The id of the partition of hold ``hold_id``'s limit for label value ``value`` (a
    digest: a value may hold any printable character, a store key only a few)."""
    digest = hashlib.blake2b(value.encode(), digest_size=10).hexdigest()
    return f"{hold_id}:{digest}"


def records_prefix(hold_id: str) -> str:
    """The start of the keys of every record of hold ``hold_id``'s limit, partitions too."""
    return f"limit:{hold_id}:"


def slots_key(hold_id: str) -> str:
    """The store record of the concurrency slots of hold ``hold_id``'s limit."""
    return f"limit:{hold_id}:slots"


def rate_key(hold_id: str) -> str:
    """The store record of the rate of hold ``hold_id``'s limit."""
    return f"limit:{hold_id}:rate"
