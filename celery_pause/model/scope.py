"""What a pause covers: queues, task names and workers.

A hold's scope is one :class:`Rule`: the intersection of up to three dimensions, each
"every" when not given — queue names (exact), task names and worker hostnames (exact or
shell-style patterns: ``proj.billing.*``, ``w1@*``). What a cluster or a worker pauses is
a :class:`Scope`: the union of the rules of its live holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase, translate
from functools import cached_property
from typing import Any

from .formatting import SHOWN_TEXT

Names = frozenset[str] | None
"""A dimension of a rule: the names it lists, or ``None`` for every name."""

DIMENSIONS = ("queues", "tasks", "workers")
PATTERN = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Rule:
    """The tasks of ``queues`` named ``tasks`` on ``workers``; ``None`` is every."""

    queues: Names = None
    tasks: Names = None
    workers: Names = None

    def covers(self, queue: str, task: str | None = None, worker: str | None = None) -> bool:
        """Whether the rule covers ``task`` of ``queue`` on ``worker``; an argument left
        out means *every* task (or worker), which only a rule without that dimension covers."""
        if self.queues is not None and queue not in self.queues:
            return False
        return _matches(self.tasks, task, self._task_patterns) and _matches(
            self.workers, worker, self._worker_patterns
        )

    def contains(self, other: Rule) -> bool:
        """Whether every dimension of this rule lists all that ``other``'s lists."""
        return all(_contains(getattr(self, d), getattr(other, d)) for d in DIMENSIONS)

    def overlaps(self, other: Rule) -> bool:
        """Whether some task could be covered by both rules."""
        return all(_overlap(getattr(self, d), getattr(other, d)) for d in DIMENSIONS)

    def intersection(self, other: Rule) -> Rule | None:
        """The rule covering what both cover (patterns kept where the other's names match
        them), or ``None`` if they share nothing."""
        if not self.overlaps(other):
            return None
        return Rule(*(_common(getattr(self, d), getattr(other, d)) for d in DIMENSIONS))

    def to_json(self) -> dict[str, list[str] | None]:
        return {d: _sorted(getattr(self, d)) for d in DIMENSIONS}

    def describe(self) -> str:
        """``all queues``, ``queue a``, ``tasks x, y in queues a, b on worker w1@h``."""
        parts = []
        if self.tasks is not None:
            parts.append(_listed("task", self.tasks))
        if self.queues is not None:
            parts.append(("in " if parts else "") + _listed("queue", self.queues))
        elif not parts:
            parts.append("all queues")
        if self.workers is not None:
            parts.append("on " + _listed("worker", self.workers))
        return " ".join(parts)

    @cached_property
    def _task_patterns(self) -> re.Pattern[str] | None:
        return _compile(self.tasks)

    @cached_property
    def _worker_patterns(self) -> re.Pattern[str] | None:
        return _compile(self.workers)


EVERY = Rule()


@dataclass(frozen=True)
class Scope:
    """A union of rules: what a hold, a worker or the whole cluster pauses."""

    rules: frozenset[Rule] = frozenset()

    @classmethod
    def of(
        cls,
        queues: Iterable[str] | None = None,
        *,
        tasks: Iterable[str] | None = None,
        workers: Iterable[str] | None = None,
    ) -> Scope:
        """The scope of one rule; a dimension left ``None`` is every name, an empty one
        covers nothing (the empty scope)."""
        rule = Rule(_names(queues), _names(tasks), _names(workers))
        if any(
            names is not None and not names for names in (rule.queues, rule.tasks, rule.workers)
        ):
            return NOTHING
        return cls(frozenset({rule}))

    @property
    def everything(self) -> bool:
        """Whether every task of every queue on every worker is covered."""
        return EVERY in self.rules

    @property
    def rule(self) -> Rule:
        """The one rule of a hold's scope (``EVERY`` for an empty scope is never asked)."""
        (rule,) = self.rules
        return rule

    @property
    def queues(self) -> frozenset[str]:
        """Every queue some rule names."""
        return frozenset(q for rule in self.rules for q in (rule.queues or ()))

    def covers(self, queue: str, task: str | None = None, worker: str | None = None) -> bool:
        """Whether some rule covers ``task`` of ``queue`` on ``worker`` (as :meth:`Rule.covers`)."""
        return any(rule.covers(queue, task, worker) for rule in self.rules)

    def touches(self, queue: str, worker: str | None = None) -> bool:
        """Whether some rule covers some task of ``queue`` (on ``worker``, if given)."""
        return any(
            (rule.queues is None or queue in rule.queues)
            and (worker is None or _matches(rule.workers, worker, rule._worker_patterns))
            for rule in self.rules
        )

    def drains(self, queue: str, worker: str) -> bool:
        """Whether a worker-scoped rule takes ``worker`` off ``queue`` entirely."""
        return any(
            rule.workers is not None and rule.tasks is None and rule.covers(queue, None, worker)
            for rule in self.rules
        )

    def overlaps(self, other: Scope) -> bool:
        return any(a.overlaps(b) for a in self.rules for b in other.rules)

    def for_worker(self, hostname: str) -> Scope:
        """The rules that apply on the worker ``hostname``."""
        return Scope(
            frozenset(
                rule
                for rule in self.rules
                if rule.workers is None or _matches(rule.workers, hostname, rule._worker_patterns)
            )
        )

    def __or__(self, other: Scope) -> Scope:
        return Scope(_merged(self.rules | other.rules))

    def __and__(self, other: Scope) -> Scope:
        common = (a.intersection(b) for a in self.rules for b in other.rules)
        return Scope(_merged(frozenset(rule for rule in common if rule is not None)))

    def __bool__(self) -> bool:
        return bool(self.rules)

    def names(self) -> list[str] | None:
        """The queues named, sorted, or ``None`` when a rule covers every queue (JSON form)."""
        if any(rule.queues is None for rule in self.rules):
            return None
        return sorted(self.queues)

    def to_json(self) -> list[dict[str, list[str] | None]]:
        return sorted((rule.to_json() for rule in self.rules), key=repr)

    def describe(self) -> str:
        """Each rule described, ``; `` between them; ``no queue`` when empty."""
        if not self.rules:
            return "no queue"
        if self.everything:
            return "all queues"
        return "; ".join(sorted(rule.describe() for rule in self.rules))


NOTHING = Scope()
EVERYTHING = Scope(frozenset({EVERY}))


def is_pattern(name: str) -> bool:
    """Whether ``name`` is a shell-style pattern rather than an exact name."""
    return PATTERN.search(name) is not None


def rule_from_json(data: Any) -> Rule:
    """The rule of a stored hold; raises ``ValueError`` for anything but lists of names."""
    values = []
    for dimension in DIMENSIONS:
        names = data.get(dimension) if dimension != "queues" else data["queues"]
        if names is not None and not (
            isinstance(names, list) and names and all(isinstance(n, str) for n in names)
        ):
            raise ValueError(f"{dimension} is {names!r}")
        values.append(_names(names))
    return Rule(*values)


def _names(names: Iterable[str] | None) -> Names:
    return None if names is None else frozenset(names)


def _merged(rules: frozenset[Rule]) -> frozenset[Rule]:
    """Rules that differ only in their queues joined into one (``EVERY`` absorbs all)."""
    if EVERY in rules:
        return frozenset({EVERY})
    joined: dict[tuple[Names, Names], Names] = {}
    for rule in rules:
        key = (rule.tasks, rule.workers)
        if key in joined:
            before = joined[key]
            joined[key] = None if before is None or rule.queues is None else before | rule.queues
        else:
            joined[key] = rule.queues
    return frozenset(Rule(queues, tasks, workers) for (tasks, workers), queues in joined.items())


def _compile(names: Names) -> re.Pattern[str] | None:
    patterns = [translate(n) for n in names or () if is_pattern(n)]
    return re.compile("|".join(patterns)) if patterns else None


def _matches(names: Names, value: str | None, patterns: re.Pattern[str] | None) -> bool:
    if names is None:
        return True
    if value is None:
        return False
    return value in names or (patterns is not None and patterns.match(value) is not None)


def _contains(outer: Names, inner: Names) -> bool:
    return outer is None or (inner is not None and inner <= outer)


def _overlap(a: Names, b: Names) -> bool:
    if a is None or b is None:
        return True
    return any(x == y or fnmatchcase(x, y) or fnmatchcase(y, x) for x in a for y in b)


def _common(a: Names, b: Names) -> Names:
    """Names both cover: each name of one that the other lists or matches."""
    if a is None or b is None:
        return b if a is None else a
    return frozenset(
        {x for x in a if any(x == y or fnmatchcase(x, y) for y in b)}
        | {y for y in b if any(fnmatchcase(y, x) for x in a)}
    )


def _sorted(names: Names) -> list[str] | None:
    return None if names is None else sorted(names)


def _listed(kind: str, names: frozenset[str]) -> str:
    text = ", ".join(sorted(names))
    if len(text) > SHOWN_TEXT:
        text = f"{text[:SHOWN_TEXT]}… ({len(names)} {kind}s)"
    return (kind if len(names) == 1 else kind + "s") + " " + text
