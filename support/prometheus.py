"""A real Prometheus server (Debian's ``prometheus`` package) for the tests, and its HTTP API.

:func:`prometheus_server` runs ``prometheus`` on a free loopback port with a configuration the
test wrote, its data in the test's directory; :class:`PrometheusApi` asks it what it scraped
and evaluated (``/api/v1/query``, ``/api/v1/alerts``, ``/api/v1/rules``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .harness import free_port, wait_for
from .processes import track
from .webclient import call

INSTALL = "apt-get install -y --no-install-recommends prometheus"


def require_prometheus() -> str:
    """The ``prometheus`` binary: skipped without it on a laptop, a failure in CI."""
    binary = shutil.which("prometheus")
    if binary is not None:
        return binary
    message = f"the prometheus server is not installed ({INSTALL})"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must install it (.ci/run)")
    pytest.skip(message)


@dataclass(frozen=True)
class PrometheusApi:
    """The HTTP API of a running Prometheus server at ``url``."""

    url: str
    log: Path

    def get(self, path: str, **params: str) -> Any:
        """``data`` of a successful ``GET path?params``; an assertion error otherwise."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        reply = call(f"{self.url}{path}{query}")
        assert reply.status == 200, f"{path} {params}: {reply.status} {reply.body[:500]!r}"
        body = reply.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> dict[frozenset[tuple[str, str]], float]:
        """An instant query's vector: the value of each series, keyed by its labels."""
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return {
            frozenset(sample["metric"].items()): float(sample["value"][1])
            for sample in data["result"]
        }

    def alerts(self, name: str) -> list[dict[str, Any]]:
        """The active alerts (pending or firing) of the rule ``name``."""
        return [a for a in self.get("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == name]

    def rule(self, name: str) -> dict[str, Any]:
        """The loaded alerting or recording rule ``name``."""
        for group in self.get("/api/v1/rules")["groups"]:
            for rule in group["rules"]:
                if rule["name"] == name:
                    return dict(rule)
        raise AssertionError(f"no rule {name} loaded")


@contextmanager
def prometheus_server(config: Path, data: Path) -> Iterator[PrometheusApi]:
    """``prometheus`` with ``config`` (its rule files beside it), storing into ``data``, on a
    free loopback port for as long as the block runs; its log is ``data/../prometheus.log``."""
    binary = require_prometheus()
    port = free_port()
    log = data.parent / "prometheus.log"
    with open(log, "ab") as out:
        server = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    track(server)
    api = PrometheusApi(f"http://127.0.0.1:{port}", log)

    def ready() -> bool:
        if server.poll() is not None:
            raise AssertionError(f"prometheus exited with {server.returncode}:\n{log.read_text()}")
        try:
            return call(f"{api.url}/-/ready").status == 200
        except OSError:
            return False

    try:
        wait_for(ready, timeout=30, what="prometheus to be ready", interval=0.1)
        yield api
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
