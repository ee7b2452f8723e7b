"""Labels a task carries: ``pause_labels`` names each and the keyword argument it is read from.

The gate reads a request's labels only while some rule, ramp or limit in force lists a
label, and then only the labels listed: a request no label scope could cover costs nothing.
A message header of the label's name wins over the keyword argument (``apply_async(...,
headers={"tenant": "acme"})``); a value that is not a string counts by its string form; a
task without the label is outside every scope of that label.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from celery.worker.request import Request


class LabelReader:
    """Reads the labels of requests, by the app's ``pause_labels``."""

    def __init__(self, kwargs: Mapping[str, str]) -> None:
        """``kwargs``: each label name and the keyword argument it is read from."""
        self._kwargs = dict(kwargs)

    def read(self, request: Request, names: Iterable[str]) -> tuple[str, ...]:
        """``name=value`` of each of the labels ``names`` that ``request`` carries."""
        headers = request.message.headers or {}
        kwargs = request.kwargs if isinstance(request.kwargs, dict) else {}
        found = []
        for name in names:
            value = headers.get(name)
            if value is None and name in self._kwargs:
                value = kwargs.get(self._kwargs[name])
            if value is not None:
                found.append(f"{name}={value}")
        return tuple(found)
