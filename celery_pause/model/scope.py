"""What a pause covers: the dimensions of a scope, a task's place in them, rules and scopes.

Every dimension is one row of :data:`DIMENSIONS`: queue names (exact), task names and worker
hostnames (exact or shell-style patterns: ``proj.billing.*``, ``w1@*``), and labels read from
each task (``tenant=acme``, ``tenant=trial-*``: see ``pause_labels``). A task's
:class:`Target` is its coordinate in each (its labels: every ``name=value`` it carries). A
hold's scope is one :class:`Rule`: the intersection of its dimensions, each "every" when not
given. What a cluster or a worker pauses is a :class:`Scope`: the union of the rules of its
live holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase, translate
from functools import cached_property
from typing import Any, NamedTuple

from .formatting import SHOWN_TEXT, printable

Names = frozenset[str] | None
"""A dimension of a rule: the names it lists, or ``None`` for every name."""

PATTERN = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Dimension:
    """One dimension of a scope: how it is named, checked, given and shown."""

    name: str
    """The field of a :class:`Rule`, of a hold's JSON, of the admin API and of ``resume``."""
    singular: str
    """One value of it: the field of a :class:`Target`, and how messages name it."""
    patterns: bool
    """Whether shell-style patterns match its values (``proj.billing.*``)."""
    flags: tuple[str, ...]
    """The CLI's option names for it."""
    help: str
    """The CLI's help for it."""
    multi: bool = False
    """Whether a task has several values in it (labels): a rule covers it if one matches."""
    form: re.Pattern[str] | None = None
    """What each of its names must look like, if not any printable text."""
    shown: str = ""
    """How its form reads in an error message."""
    always: bool = True
    """Whether a rule's JSON names it when it is every value (``null``); a dimension added
    later is left out then, so documents read as before."""


DIMENSIONS: tuple[Dimension, ...] = (
    Dimension(
        "queues", "queue", patterns=False, flags=("-Q", "--queues"),
        help="Comma-separated queue names (default: every queue).",
    ),
    Dimension(
        "tasks", "task", patterns=True, flags=("--tasks",),
        help="Comma-separated task names or patterns, e.g. proj.billing.* (default: every task).",
    ),
    Dimension(
        "workers", "worker", patterns=True, flags=("-d", "--destination"),
        help="Comma-separated worker hostnames or patterns, e.g. w1@* (default: every worker).",
    ),
    Dimension(
        "labels", "label", patterns=True, flags=("--label",),
        help="Comma-separated labels NAME=VALUE, the value exact or a pattern, e.g. "
        "tenant=acme (labels: pause_labels; default: every task, labelled or not).",
        multi=True, form=re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}=\S.*\Z"), shown="NAME=VALUE",
        always=False,
    ),
)  # fmt: skip
"""Every dimension of a scope, in the order they are shown."""

NAMES = tuple(d.name for d in DIMENSIONS)


class Target(NamedTuple):
    """Where a task stands in each dimension; ``None`` stands for *every* value of one.

    Built once per request by the worker's gate (a tuple: cheap to build on that path);
    callers asking about a whole queue or a whole worker leave the other coordinates out.
    """

    queue: str | None = None
    task: str | None = None
    worker: str | None = None
    label: tuple[str, ...] | None = None
    """Every ``name=value`` the task carries (``None``: not read, as for every value)."""

    def at(self, dimension: Dimension) -> str | tuple[str, ...] | None:
        """The coordinate in ``dimension``."""
        value: str | tuple[str, ...] | None = getattr(self, dimension.singular)
        return value


@dataclass(frozen=True)
class Rule:
    """The tasks of ``queues`` named ``tasks`` on ``workers``; ``None`` is every."""

    queues: Names = None
    tasks: Names = None
    workers: Names = None
    labels: Names = None

    def covers(self, target: Target) -> bool:
        """Whether the rule covers ``target``; a coordinate left out means *every* value,
        which only a rule without that dimension covers."""
        # On the gate's path for every request while something is paused: one pass over the
        # dimensions this rule names, prepared once per rule.
        for coordinate, names, patterns, multi in self._checks:
            value = getattr(target, coordinate)
            if value is None:
                return False
            if multi:
                if not any(_hit(one, names, patterns) for one in value):
                    return False
            elif value not in names and (patterns is None or patterns.match(value) is None):
                return False
        return True

    def touches(self, target: Target) -> bool:
        """Whether the rule covers *some* task at ``target`` (a coordinate left out: any)."""
        return all(target.at(d) is None or self._matches(d, target.at(d)) for d in DIMENSIONS)

    def names(self, dimension: Dimension) -> Names:
        """What the rule lists in ``dimension`` (``None``: every value)."""
        names: Names = getattr(self, dimension.name)
        return names

    def _matches(self, dimension: Dimension, value: str | tuple[str, ...] | None) -> bool:
        names = self.names(dimension)
        if names is None:
            return True
        if value is None:
            return False
        patterns = self._patterns.get(dimension.name)
        values = value if isinstance(value, tuple) else (value,)
        return any(_hit(one, names, patterns) for one in values)

    def contains(self, other: Rule) -> bool:
        """Whether every dimension of this rule lists all that ``other``'s lists."""
        return all(_contains(self.names(d), other.names(d)) for d in DIMENSIONS)

    def overlaps(self, other: Rule) -> bool:
        """Whether some task could be covered by both rules."""
        return all(_overlap(self.names(d), other.names(d)) for d in DIMENSIONS)

    def intersection(self, other: Rule) -> Rule | None:
        """The rule covering what both cover (patterns kept where the other's names match
        them), or ``None`` if they share nothing."""
        if not self.overlaps(other):
            return None
        return Rule(*(_common(self.names(d), other.names(d)) for d in DIMENSIONS))

    def to_json(self) -> dict[str, list[str] | None]:
        return {
            d.name: _sorted(self.names(d))
            for d in DIMENSIONS
            if d.always or self.names(d) is not None
        }

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
        if self.labels is not None:
            parts.append("with " + _listed("label", self.labels))
        return " ".join(parts)

    @cached_property
    def _checks(self) -> tuple[tuple[str, frozenset[str], re.Pattern[str] | None, bool], ...]:
        """Per dimension the rule names: the target's coordinate, the names, the patterns,
        whether a target has several values in it."""
        return tuple(
            (d.singular, names, self._patterns.get(d.name), d.multi)
            for d in DIMENSIONS
            if (names := self.names(d)) is not None
        )

    @cached_property
    def _patterns(self) -> dict[str, re.Pattern[str]]:
        """Per dimension that allows them, the patterns it lists, compiled into one."""
        compiled = {}
        for dimension in DIMENSIONS:
            pattern = _compile(self.names(dimension)) if dimension.patterns else None
            if pattern is not None:
                compiled[dimension.name] = pattern
        return compiled


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
        labels: Iterable[str] | None = None,
    ) -> Scope:
        """The scope of one rule; a dimension left ``None`` is every name, an empty one
        covers nothing (the empty scope)."""
        return cls.of_names(
            {"queues": queues, "tasks": tasks, "workers": workers, "labels": labels}
        )

    @classmethod
    def of_names(cls, names: dict[str, Iterable[str] | None]) -> Scope:
        """The scope of one rule listing ``names[d]`` in each dimension ``d`` (as :meth:`of`)."""
        listed = [_names(names.get(d.name)) for d in DIMENSIONS]
        if any(values is not None and not values for values in listed):
            return NOTHING
        return cls(frozenset({Rule(*listed)}))

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

    def covers(self, target: Target) -> bool:
        """Whether some rule covers ``target`` (as :meth:`Rule.covers`)."""
        for rule in self.rules:  # noqa: SIM110  (a loop, not any(): the gate asks per request)
            if rule.covers(target):
                return True
        return False

    def touches(self, target: Target) -> bool:
        """Whether some rule covers some task at ``target`` (as :meth:`Rule.touches`)."""
        return any(rule.touches(target) for rule in self.rules)

    def drains(self, queue: str, worker: str) -> bool:
        """Whether a rule of queues and workers alone takes ``worker`` off ``queue`` entirely."""
        whole = Target(queue=queue, worker=worker)
        return any(rule.workers is not None and rule.covers(whole) for rule in self.rules)

    def overlaps(self, other: Scope) -> bool:
        return any(a.overlaps(b) for a in self.rules for b in other.rules)

    def for_worker(self, hostname: str) -> Scope:
        """The rules that apply on the worker ``hostname``."""
        here = Target(worker=hostname)
        return Scope(frozenset(rule for rule in self.rules if rule.touches(here)))

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

    @property
    def singular(self) -> bool:
        """Whether :meth:`describe` reads as one thing (``queue emails``, ``task x in …``),
        so that a verb after it agrees: ``queue emails flows``, ``all queues flow``."""
        if len(self.rules) != 1 or self.everything:
            return False
        rule = self.rule
        named = rule.tasks if rule.tasks is not None else rule.queues
        return named is not None and len(named) == 1

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
        # a stored rule always names its queues (``null`` for every one); later dimensions
        # may be missing from state written by an older release
        names = data[dimension.name] if dimension is DIMENSIONS[0] else data.get(dimension.name)
        if names is not None and not (
            isinstance(names, list) and names and all(isinstance(n, str) for n in names)
        ):
            raise ValueError(f"{dimension.name} is {names!r}")
        values.append(_names(names))
    return Rule(*values)


def label_names(scope: Scope) -> frozenset[str]:
    """The label names (``tenant`` of ``tenant=acme``) some rule of ``scope`` lists."""
    return frozenset(
        label.partition("=")[0] for rule in scope.rules for label in (rule.labels or ())
    )


def _hit(value: str, names: frozenset[str], patterns: re.Pattern[str] | None) -> bool:
    return value in names or (patterns is not None and patterns.match(value) is not None)


def _names(names: Iterable[str] | None) -> Names:
    return None if names is None else frozenset(names)


def _merged(rules: frozenset[Rule]) -> frozenset[Rule]:
    """Rules that differ only in their queues joined into one (``EVERY`` absorbs all)."""
    if EVERY in rules:
        return frozenset({EVERY})
    joined: dict[tuple[Names, ...], Names] = {}
    for rule in rules:
        key = tuple(rule.names(d) for d in DIMENSIONS[1:])
        if key in joined:
            before = joined[key]
            joined[key] = None if before is None or rule.queues is None else before | rule.queues
        else:
            joined[key] = rule.queues
    return frozenset(Rule(queues, *rest) for rest, queues in joined.items())


def _compile(names: Names) -> re.Pattern[str] | None:
    patterns = [translate(n) for n in names or () if is_pattern(n)]
    return re.compile("|".join(patterns)) if patterns else None


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
    text = printable(", ".join(sorted(names)))
    if len(text) > SHOWN_TEXT:
        text = f"{text[:SHOWN_TEXT]}… ({len(names)} {kind}s)"
    return (kind if len(names) == 1 else kind + "s") + " " + text
