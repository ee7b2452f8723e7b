"""The benchmarks' targets: one table, from which both the verdicts and their text derive."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

POLL_INTERVAL = 2.0
"""Seconds: the default ``pause_poll_interval``, at which the benchmarks run their workers."""
FALLBACK_BOUND_MS = POLL_INTERVAL * 1000 + 100
"""A pause whose push is lost lands within one polling interval and 100 ms."""

_COMPARE: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, ">=": operator.ge}
ABBREVIATIONS = {"broadcast_p99_ms": "bcast"}
"""How a target's text names the figure its bound is a multiple of."""


@dataclass(frozen=True)
class Target:
    """A bound on one figure: ``figure op limit``, or ``figure op limit x of`` (another figure).

    Parameters:
        name: the verdict's key.
        figure: the key of the figure judged.
        op: ``"<="`` (at most) or ``">="`` (at least).
        limit: the bound, or the multiple of ``of``.
        of: the figure the bound is a multiple of, if any.
        label: how the table's target column names the figure (``"p99"``), if at all.
    """

    name: str
    figure: str
    op: Literal["<=", ">="]
    limit: float
    of: str | None = None
    label: str = ""

    def bound(self, figures: Mapping[str, float]) -> float:
        """The bound in the figure's unit."""
        return self.limit * figures[self.of] if self.of else self.limit

    def met(self, figures: Mapping[str, float]) -> bool:
        """Whether ``figures[figure]`` is within the bound."""
        return _COMPARE[self.op](figures[self.figure], self.bound(figures))

    @property
    def text(self) -> str:
        """The target as the table prints it: ``p99 <= 50``, ``<= 1.5x bcast``."""
        bound = f"{self.limit:g}x {ABBREVIATIONS[self.of]}" if self.of else f"{self.limit:g}"
        return " ".join(part for part in (self.label, self.op, bound) if part)


TARGETS = {
    target.name: target
    for target in (
        Target("throughput_ratio", "throughput_ratio", ">=", 0.98),
        Target("pause_p99_ms", "pause_p99_ms", "<=", 50, label="p99"),
        Target("pause_vs_broadcast", "pause_p99_ms", "<=", 1.5, of="broadcast_p99_ms"),
        Target("fallback_p99_ms", "fallback_p99_ms", "<=", FALLBACK_BOUND_MS),
        Target("resume_p50_ms", "resume_p50_ms", "<=", 50, label="p50"),
        Target("idle_store_cmds_per_s", "idle_store_cmds_per_s", "<=", 1),
        Target("task_scope_ratio", "ratio", ">=", 0.9),
        Target("status_p99_ms", "status_p99_ms", "<=", 250),
        Target("wait_overhead_p99_ms", "wait_overhead_p99_ms", "<=", 100),
        Target("idle_per_worker", "idle_store_cmds_per_s_per_worker", "<=", 1),
    )
}
"""Every benchmark's targets, by name."""

RUN_TARGETS = (
    "throughput_ratio",
    "pause_p99_ms",
    "pause_vs_broadcast",
    "fallback_p99_ms",
    "resume_p50_ms",
    "idle_store_cmds_per_s",
)
"""The targets of ``bench.run`` (4 workers)."""
POOL_TARGETS = ("throughput_ratio", "pause_p99_ms", "pause_vs_broadcast", "resume_p50_ms")
"""The targets of ``bench.run`` also applied to each pool's figures."""
TASK_SCOPE_TARGETS = ("task_scope_ratio",)
"""The target of ``bench.task_scope``, on each broker."""
SCALE_TARGETS = ("status_p99_ms", "wait_overhead_p99_ms", "idle_per_worker")
"""The targets of ``bench.scale``, set for 1000 workers."""


def verdicts(figures: Mapping[str, float], names: Iterable[str] = RUN_TARGETS) -> dict[str, bool]:
    """Met or not, for each of the targets ``names``."""
    return {name: TARGETS[name].met(figures) for name in names}


def describe(*names: str) -> str:
    """The targets ``names`` as the table prints them, comma-separated."""
    return ", ".join(TARGETS[name].text for name in names)


def mark(found: Mapping[str, bool], *names: str) -> str:
    """The verdicts of ``names`` as the table prints them: ``met``, ``met, MISSED``."""
    return ", ".join("met" if found[name] else "MISSED" for name in names)
