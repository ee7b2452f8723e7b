"""A tiny HTTP client for the tests, and readers for what the servers print."""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from support.harness import Worker, wait_for


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(
    url: str,
    *,
    method: str = "GET",
    body: Any = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> Reply:
    """One HTTP request; error statuses are returned, not raised."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    all_headers = dict(headers or {})
    if body is not None:
        all_headers.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Reply(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        return Reply(error.code, dict(error.headers), error.read())


def probe_url(worker: Worker, timeout: float = 30.0) -> str:
    """The base URL the worker logged for its probes."""

    def logged() -> str | None:
        worker.check_alive()
        match = re.search(r"/metrics on (http://\S+)", worker.log.read_text(errors="replace"))
        return match.group(1) if match else None

    return wait_for(logged, timeout=timeout, what=f"{worker.hostname} to serve its probes")


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of sample ``name`` with ``labels`` in a Prometheus exposition, if present."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def refuses_connections(port: int) -> bool:
    with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return False
    return True
