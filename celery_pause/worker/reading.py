"""Where a request stands in every dimension of a scope: read from its message, never raising.

A message's content is the producer's to write (:mod:`celery_pause.model.content`), so
:class:`TargetReader` reads it defensively, once per decision, on whatever thread asks (the
consumer loop, the store thread, a pool thread), and a message it still cannot read stands
with every label listed :data:`~celery_pause.model.content.UNREADABLE`, with one WARNING a
minute naming the task.

Labels (``pause_labels`` names each and the keyword argument it is read from) are read only
while some rule, ramp or limit in force lists a label, and then only the labels listed: a
request no label scope could cover costs nothing. A message header of the label's name wins
over the keyword argument (``apply_async(..., headers={"tenant": "acme"})``); a number or a
boolean counts by its string form, and any other value, or text that is too long or not
printable, reads as unreadable (:func:`~celery_pause.model.content.label_value`); a task
without the label is outside every scope of that label.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from celery.worker.request import Request

from ..logs import ThrottledLog
from ..model.content import UNREADABLE, label_value, shown, text_of, units
from ..model.scope import Target

logger = logging.getLogger(__name__)
_new_target = tuple.__new__
UNREADABLE_LOG_EVERY = 60.0
"""Seconds between two warnings of messages that could not be read."""


class TargetReader:
    """Reads where requests stand: their queue, task name, this worker and their labels."""

    def __init__(
        self, *, queue_of: Callable[[Request], str], hostname: str, labels: Mapping[str, str]
    ) -> None:
        """``labels``: each label name and the keyword argument it is read from."""
        self._queue_of = queue_of
        self.hostname = hostname
        self._kwargs = dict(labels)
        self.names: tuple[str, ...] = ()
        """The label names to read (those some rule, ramp or limit in force lists)."""
        self._log = ThrottledLog(logger, every=UNREADABLE_LOG_EVERY)

    def __call__(self, request: Request) -> Target:
        names = self.names
        try:
            labels = self.labels(request, names) if names else None
            name = text_of(request.name)  # a shadow name is the producer's too: of any type
            # A plain tuple: a third of Target(...)'s cost, paid per request when paused.
            return _new_target(Target, (self._queue_of(request), name, self.hostname, labels))
        except Exception as exc:  # a message's content may be of any type at all
            self.warn(
                request, "its message could not be read (%r): its labels read as unreadable", exc
            )
            labels = tuple(f"{label}={UNREADABLE}" for label in names) if names else None
            name = text_of(getattr(request, "name", None))
            return _new_target(Target, (self._queue_of(request), name, self.hostname, labels))

    def labels(self, request: Request, names: Iterable[str]) -> tuple[str, ...]:
        """``name=value`` of each of the labels ``names`` that ``request`` carries."""
        headers = _mapping(getattr(request.message, "headers", None))
        kwargs = _mapping(request.kwargs)
        found = []
        for name in names:
            value = headers.get(name)
            if value is None and name in self._kwargs:
                value = kwargs.get(self._kwargs[name])
            text = label_value(value)
            if text is UNREADABLE:  # the constant: a value that spells it reads as itself
                self.warn(
                    request, "label %s is unreadable (%s): read as %s", name, _kind(value), text
                )
            if text is not None:
                found.append(f"{name}={text}")
        return tuple(found)

    def cost(self, request: Request, name: str) -> float:
        """The units of a rate ``request`` spends, read from its header or keyword argument
        ``name``: 1 without one; a value that is not a finite number of at least 0 costs 1
        too, with a warning."""
        try:
            value = _mapping(getattr(request.message, "headers", None)).get(name)
            if value is None:
                value = _mapping(request.kwargs).get(name)
        except Exception as exc:  # a message's content may be of any type at all
            self.warn(request, "its cost could not be read (%r): it costs 1", exc)
            return 1.0
        if value is None:
            return 1.0
        cost = units(value)
        if cost is None:
            self.warn(
                request,
                "cost %s is not a number of at least 0 (%s): it costs 1",
                name,
                _kind(value),
            )
            return 1.0
        return cost

    def warn(self, request: Request, what: str, *args: Any) -> None:
        """Log, at most once a minute, that task ``request`` could not be read: ``what``."""
        self._log.warning(
            f"celery-pause: task %s: {what}", shown(getattr(request, "id", None)), *args
        )


def _kind(value: object) -> str:
    """What a value that is not a label's text is: its type, or its length if text."""
    if type(value) is str:
        return f"text of {len(value)} characters"
    return type(value).__name__


def _mapping(value: object) -> Mapping[str, object]:
    """``value`` if it is a dict (a header or keyword table of any other type reads as empty)."""
    return value if type(value) is dict else {}
