"""A simulated downstream API with a hidden capacity: an HTTP server on a free loopback port
that answers ``200`` while its token bucket has a token, else ``429`` with ``Retry-After``.

The capacity follows a schedule (calls a second from each offset on); the bucket holds a
quarter second of it (a burst the size many APIs allow). Every call is kept (time, status,
the caller's task id), for the tests and ``bench.adaptive`` to read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import parse_qs, urlparse

BURST = 0.25
"""Seconds of the capacity the bucket holds."""


@dataclass(frozen=True)
class Call:
    at: float
    """``time.time()`` the call came."""
    ok: bool
    task: str


class Downstream:
    """The server and what it answered. ``schedule``: ``(from_second, capacity)`` pairs,
    the first from 0; ``retry_after``: the seconds a 429 asks to wait."""

    def __init__(self, schedule: Sequence[tuple[float, float]], retry_after: float = 1.0) -> None:
        self.schedule = sorted(schedule)
        self.retry_after = retry_after
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._tokens = 0.0
        self._last = 0.0
        self.started = time.time()
        downstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                task = parse_qs(urlparse(self.path).query).get("task", [""])[0]
                ok = downstream._take(task)
                self.send_response(200 if ok else 429)
                if not ok:
                    self.send_header("Retry-After", f"{downstream.retry_after:g}")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/call"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Downstream:
        self.restart()
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()

    def restart(self) -> None:
        """Start the schedule (and a full bucket) from now."""
        with self._lock:
            self.started = self._last = time.time()
            self._tokens = self.capacity(0.0) * BURST

    def capacity(self, since: float) -> float:
        """Calls a second the downstream takes ``since`` seconds into its schedule."""
        return [c for at, c in self.schedule if at <= since][-1]

    def _take(self, task: str) -> bool:
        with self._lock:
            now = time.time()
            rate = self.capacity(now - self.started)
            self._tokens = min(rate * BURST, self._tokens + (now - self._last) * rate)
            self._last = now
            ok = self._tokens >= 1.0
            if ok:
                self._tokens -= 1.0
            self.calls.append(Call(now, ok, task))
            return ok

    def answered(self) -> list[Call]:
        with self._lock:
            return list(self.calls)
