"""Every check of caller input: queue names, reasons, operators, durations and date-times.

The Python API, the CLI and the admin API all check through these, so a value is
accepted or refused the same way wherever it comes from.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import InvalidInput
from .coercion import MAX_DURATION, UNITS
from .fair import Weights
from .limit import MAX_CONCURRENCY, MAX_RATE, MAX_RISE, Limit, format_rate
from .scope import DIMENSIONS, Dimension, Scope
from .state import BEAT_POLICIES

RATE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:/\s*([smh]))?\s*\Z")
LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc).timestamp()
"""The latest store time accepted for a resume or a start: the last second a date can show."""
MAX_NAMES = 100
"""Most names in one dimension of a scope (queues, tasks or workers)."""
MAX_NAME = 200
MAX_REASON = 1000
MAX_OPERATOR = 200
LabelValue = str | int
Labels = Mapping[str, LabelValue | Sequence[LabelValue]] | Iterable[str] | str | None
"""Labels as a caller gives them: ``NAME=VALUE`` texts (``["tenant=acme"]``), or a mapping
of each name to a value or pattern, or to a list or tuple of them (:func:`label_texts`)."""


def check_queues(queues: Iterable[str] | str | None) -> list[str] | None:
    """Queue names (exact), or ``None`` for every queue."""
    return check_names(queues, "queue")


def check_tasks(tasks: Iterable[str] | str | None) -> list[str] | None:
    """Task names or shell-style patterns (``proj.billing.*``), or ``None`` for every task."""
    return check_names(tasks, "task")


def check_workers(workers: Iterable[str] | str | None) -> list[str] | None:
    """Worker hostnames or patterns (``w1@*``), or ``None`` for every worker."""
    return check_names(workers, "worker")


def check_names(names: Iterable[str] | str | None, kind: str) -> list[str] | None:
    """A non-empty list of at most :data:`MAX_NAMES` names of ``kind``, or ``None``."""
    if names is None:
        return None
    listed = [names] if isinstance(names, str) else list(itertools.islice(names, MAX_NAMES + 1))
    if not listed:
        raise InvalidInput(f"{kind}s must name at least one {kind} (or be None for all)")
    if len(listed) > MAX_NAMES:
        raise InvalidInput(f"at most {MAX_NAMES} {kind}s at once, got more than that")
    for name in listed:
        if not isinstance(name, str) or not name.strip():
            raise InvalidInput(f"{kind} names must be non-empty strings, got {name!r}")
        if len(name) > MAX_NAME:
            raise InvalidInput(f"{kind} name longer than {MAX_NAME} characters")
        if not name.isprintable():
            raise InvalidInput(
                f"{kind} names must be printable: {ascii(name)[:80]} holds a control or other "
                "non-printable character"
            )
    return [name.strip() for name in listed]


def check_scope(given: Mapping[str, Any]) -> Scope:
    """The scope of one rule from the names ``given`` per dimension (``queues``, ``tasks``,
    …: a name, a list of names, or ``None`` for every one), each checked by
    :func:`check_names`."""
    return Scope.of_names({d.name: check_dimension(d, given.get(d.name)) for d in DIMENSIONS})


def check_dimension(dimension: Dimension, names: Labels) -> list[str] | None:
    """The names given in ``dimension`` (:func:`check_names`), each of its form if it has
    one (a label is ``NAME=VALUE``); labels may be given as a mapping (:func:`label_texts`)."""
    if isinstance(names, Mapping):
        if dimension.name != "labels":
            raise InvalidInput(f"{dimension.name} must be a name or a list of names, not a dict")
        names = label_texts(names)
    checked = check_names(names, dimension.singular)
    form = dimension.form
    for name in checked or ():
        if form is not None and not form.match(name):
            raise InvalidInput(
                f"{dimension.singular} must be {dimension.shown}, got {ascii(name)[:80]}"
            )
    return checked


def label_texts(labels: Mapping[Any, Any]) -> list[str]:
    """``{"tenant": "acme"}`` as ``["tenant=acme"]``: each name to a value or pattern, or
    to a list or tuple of them (a whole number counts by its text, as a task's label does);
    a task carrying any one is covered, as with the list form."""
    texts: list[str] = []
    for name, given in labels.items():
        if not isinstance(name, str) or not LABEL_NAME.match(name):
            raise InvalidInput(f"not a label name (like tenant, env.stage): {ascii(name)[:80]}")
        for value in (given if isinstance(given, (list, tuple)) else (given,)) or ("",):
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise InvalidInput(
                    f"label {name!r}: a value is a string or a whole number (or a list or "
                    f"tuple of them), got {type(value).__name__}"
                )
            if not str(value).strip():
                raise InvalidInput(f"label {name!r} has no value")
            if len(texts) == MAX_NAMES:
                raise InvalidInput(f"at most {MAX_NAMES} labels at once, got more than that")
            texts.append(f"{name}={value}")
    return texts


def check_reason(reason: str | None) -> str | None:
    if reason is not None and not isinstance(reason, str):
        raise InvalidInput(f"reason must be a string, got {type(reason).__name__}")
    if reason is not None and len(reason) > MAX_REASON:
        raise InvalidInput(f"reason longer than {MAX_REASON} characters ({len(reason)})")
    return reason


def check_operator(by: str | None) -> str | None:
    """Who acts (``by``), a printable string of at most :data:`MAX_OPERATOR` characters."""
    if by is not None and not isinstance(by, str):
        raise InvalidInput(f"by must be a string, got {type(by).__name__}")
    if by is not None and len(by) > MAX_OPERATOR:
        raise InvalidInput(f"by longer than {MAX_OPERATOR} characters ({len(by)})")
    if by is not None and not by.isprintable():
        raise InvalidInput(f"by must be printable, got {ascii(by)[:80]}")
    return by


def check_resume(
    resume_after: timedelta | float | None, resume_at: datetime | float | None
) -> Callable[[float], float | None]:
    """From store time ``now``, the auto-resume time (or ``None``)."""
    if resume_after is not None and resume_at is not None:
        raise InvalidInput("give resume_after or resume_at, not both")
    if resume_after is not None:
        seconds = (
            resume_after.total_seconds()
            if isinstance(resume_after, timedelta)
            else _seconds(resume_after, "resume_after")
        )
        if not (0 < seconds <= MAX_DURATION.total_seconds()):  # NaN too
            raise InvalidInput(
                f"resume_after must be positive and finite, at most 366 days, got {resume_after!r}"
            )
        return lambda now: now + seconds
    if resume_at is not None:
        at = (
            _timestamp(resume_at)
            if isinstance(resume_at, datetime)
            else _seconds(resume_at, "resume_at")
        )
        if not math.isfinite(at):
            raise InvalidInput(f"resume_at must be a finite time, got {resume_at!r}")
        check_before_latest("resume_at", at)
        return lambda now: at
    return lambda now: None


def check_start(start_at: datetime | float | None) -> float | None:
    """The store time a scheduled pause starts (``None``: at once); the caller checks that
    it lies ahead of the store's clock."""
    if start_at is None:
        return None
    at = (
        _timestamp(start_at, "start_at")
        if isinstance(start_at, datetime)
        else _seconds(start_at, "start_at")
    )
    if not math.isfinite(at):
        raise InvalidInput(f"start_at must be a finite time, got {start_at!r}")
    return check_before_latest("start_at", at)


def check_before_latest(name: str, at: float) -> float:
    """``at`` (store time), if it is a time a date can show: before the year 10000."""
    if at >= LATEST:
        raise InvalidInput(f"{name} is out of range (after the year 9999): {at!r}")
    return at


def check_timeout(timeout: float) -> float:
    """Seconds to wait: a positive, finite number."""
    seconds = _seconds(timeout, "timeout")
    if not (0 < seconds < math.inf):  # NaN too
        raise InvalidInput(f"timeout must be a positive number of seconds, got {timeout!r}")
    return seconds


def check_beat(beat: str | None) -> str | None:
    """A beat policy, ``queue`` or ``skip`` (``None``: the app's ``pause_beat_default``)."""
    if beat is not None and beat not in BEAT_POLICIES:
        raise InvalidInput(f"beat must be 'queue' or 'skip', got {str(beat)[:40]!r}")
    return beat


def check_ramp(ramp: timedelta | float | None) -> float | None:
    """Seconds a resume ramps over (``None``: no ramp), positive and at most a day."""
    if ramp is None:
        return None
    seconds = ramp.total_seconds() if isinstance(ramp, timedelta) else _seconds(ramp, "ramp")
    if not (0 < seconds <= MAX_RISE):
        raise InvalidInput(f"ramp must be positive and at most a day (86400 s), got {seconds:g} s")
    return seconds


def check_limit(
    rate: str | float | None,
    concurrency: int | None,
    per: str | None = None,
    cost: str | None = None,
    adaptive: bool = False,
    fair: str | None = None,
    weights: Mapping[str, float] | Iterable[str] | None = None,
) -> Limit:
    """A limit from a rate (Celery's notation: ``10/s``, ``100/m``, ``5/h``, or tasks per
    second) and a concurrency (a whole number), at least one of the two, for each value
    of the label ``per`` if given (a label's name: ``tenant``); with ``cost`` (a keyword
    argument's name: ``tokens``) the rate counts the units each task says it costs;
    ``adaptive``: both are a ceiling the downstream's overloads cut; ``fair`` (a label's
    name) shares the starts across its values, in proportion to ``weights``."""
    if rate is None and concurrency is None and fair is None:
        raise InvalidInput("give a rate (e.g. 10/s), a concurrency (e.g. 3), fair turns, or some")
    per_second = None if rate is None else parse_rate(rate)
    if concurrency is not None and (
        isinstance(concurrency, bool)
        or not isinstance(concurrency, int)
        or not 0 < concurrency <= MAX_CONCURRENCY
    ):
        huge = isinstance(concurrency, int) and abs(concurrency) > 10**18
        shown = "a number beyond that" if huge else repr(concurrency)[:40]
        raise InvalidInput(
            f"concurrency must be a whole number from 1 to {MAX_CONCURRENCY}, got {shown}"
        )
    if per is not None and (not isinstance(per, str) or not LABEL_NAME.match(per)):
        raise InvalidInput(
            f"per must name a label (like tenant: a letter or _, then letters, digits, "
            f"_ . -), got {ascii(per)[:80]}"
        )
    if cost is not None:
        if not isinstance(cost, str) or not LABEL_NAME.match(cost):
            raise InvalidInput(
                f"cost must name a keyword argument or header (like tokens: a letter or _, "
                f"then letters, digits, _ . -), got {ascii(cost)[:80]}"
            )
        if per_second is None or concurrency is not None:
            raise InvalidInput("cost weighs a rate: give --rate alone with it (no concurrency)")
    if not isinstance(adaptive, bool):
        raise InvalidInput(f"adaptive must be true or false, got {ascii(adaptive)[:40]}")
    if fair is not None and (not isinstance(fair, str) or not LABEL_NAME.match(fair)):
        raise InvalidInput(f"fair must name a label (like tenant), got {ascii(fair)[:80]}")
    try:
        weighed = Weights.parse(weights or ())
    except (TypeError, ValueError) as exc:
        raise InvalidInput(str(exc)) from None
    if weighed.rules and fair is None:
        raise InvalidInput("weights weigh fair turns: give --fair LABEL with them")
    try:
        return Limit(
            rate=per_second,
            concurrency=concurrency,
            per=per,
            cost=cost,
            adaptive=adaptive,
            fair=fair,
            weights=weighed,
        )
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None


def parse_rate(rate: str | float) -> float:
    """Tasks per second from ``10/s``, ``100/m``, ``5/h`` or a number (per second)."""
    if isinstance(rate, bool) or not isinstance(rate, (str, int, float)):
        raise InvalidInput(f"rate must be like 10/s, 100/m, 5/h or a number, got {rate!r}")
    if isinstance(rate, str):
        match = RATE.match(rate)
        if match is None:
            raise InvalidInput(
                f"not a rate: {rate[:40]!r} (use e.g. 10/s, 100/m, 5/h or tasks per second)"
            )
        per_second = float(match.group(1)) / UNITS[match.group(2) or "s"]
    else:
        try:
            per_second = float(rate)
        except OverflowError:
            per_second = float("inf")
    if not 0 < per_second <= MAX_RATE:  # NaN too
        shown = str(rate)[:40] if isinstance(rate, str) else f"{per_second:g}/s"
        raise InvalidInput(
            f"rate must be above 0 and at most {format_rate(MAX_RATE)}, got {shown!r}"
        )
    return per_second


def check_positive(
    name: str,
    value: Any,
    *,
    error: type[Exception] = InvalidInput,
    what: str = "a number",
    finite: bool = False,
) -> float:
    """A number above zero (and ``finite`` if asked) for option or setting ``name``;
    ``error`` names who refuses it (:class:`InvalidInput`, or a setting's
    :class:`~celery_pause.errors.ConfigurationError`)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise error(f"{name} must be {what}, got {value!r}") from None
    if not number > 0 or (finite and number == math.inf):  # NaN too
        raise error(f"{name} must be positive, got {value!r}")
    return number


def check_count(name: str, value: Any, *, error: type[Exception] = InvalidInput) -> int:
    """A whole number of at least 1 for option or setting ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise error(f"{name} must be a whole number of at least 1, got {value!r}")
    return value


def check_port(name: str, value: Any, *, error: type[Exception] = InvalidInput) -> int | None:
    """``None`` (off), or a TCP port; 0 picks a free one."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise error(f"{name} must be a port number, got {value!r}")
    try:
        port = int(value)
    except ValueError:
        raise error(f"{name} must be a port number, got {value!r}") from None
    if not 0 <= port <= 65535:
        raise error(f"{name} must be within 0-65535, got {port}")
    return port


LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")
KWARG = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}\Z")


def check_labels(name: str, value: Any, *, error: type[Exception] = InvalidInput) -> dict[str, str]:
    """``pause_labels``: label names to the keyword argument each is read from (``None``:
    none; a list of names: each read from the keyword argument of its own name)."""
    if value is None:
        return {}
    if isinstance(value, (list, tuple)):
        value = {label: label for label in value}
    if not isinstance(value, dict):
        raise error(f"{name} must map label names to keyword arguments, got {value!r:.60}")
    for label, kwarg in value.items():
        if not isinstance(label, str) or not LABEL_NAME.match(label):
            raise error(f"{name}: not a label name: {label!r:.60} (letters, digits, _ . -)")
        if not isinstance(kwarg, str) or not KWARG.match(kwarg):
            raise error(f"{name}: label {label!r} names no keyword argument: {kwarg!r:.60}")
    return dict(value)


def check_options(
    name: str, value: Any, *, error: type[Exception] = InvalidInput
) -> dict[str, Any]:
    """A dict of options (``None``: none)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise error(f"{name} must be a dict, got {type(value).__name__}")
    return dict(value)


def check_exceptions(value: Any) -> tuple[type[BaseException], ...]:
    """One exception class or several, as ``exceptions`` options take them."""
    types: tuple[Any, ...] = (value,) if isinstance(value, type) else tuple(value)
    if not types or not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
        raise InvalidInput(f"exceptions must be exception classes, got {value!r}")
    return types


def _timestamp(moment: datetime, name: str = "resume_at") -> float:
    try:
        return moment.timestamp()
    except (OverflowError, ValueError, OSError):
        raise InvalidInput(f"{name} is out of range: {moment!r}") from None


def _seconds(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{name} must be a number of seconds, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise InvalidInput(f"{name} is out of range") from None
