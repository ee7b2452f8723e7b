"""Pure logic of the probes and the settings, with a stand-in for the worker's monitor."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pytest
from celery import Celery

from celery_pause.errors import ConfigurationError
from celery_pause.http.health import Probes
from celery_pause.http.server import Request, Response
from celery_pause.model.scope import EVERYTHING, Scope
from celery_pause.model.state import Hold
from celery_pause.settings import PauseConfig
from support.probes import StandIn, get, view


def body(response: Response) -> Any:
    return json.loads(response.body)


def test_a_worker_paused_on_some_of_its_queues_is_still_ready() -> None:
    # Given a worker consuming a and b, with only a paused
    hold = Hold(scope=Scope.of(["a"]), paused_by="ann", reason="r", paused_at=time.time() - 5)
    monitor = StandIn(view(scope=Scope.of(["a"]), holds=(hold,)))

    # When probed, Then it is ready and says which queue is paused
    response = get(monitor, "/readyz")
    assert (response.status, body(response)) == (
        200,
        {"ready": True, "paused_queues": ["a"], "pool": "prefork", "pause_guaranteed": True},
    )


def test_a_worker_holding_everything_for_an_unreadable_state_says_so() -> None:
    # Given a worker that could not read the state at start (no hold explains the pause)
    monitor = StandIn(view(scope=EVERYTHING, since=time.time() - 2))

    # When probed, Then it is not ready, and the reason says why
    response = get(monitor, "/readyz")
    doc = body(response)
    assert response.status == 503
    assert doc["ready"] is False
    assert "could not be read" in doc["reason"]
    assert doc["paused_by"] is None
    assert doc["holds"] == []


def test_a_fully_paused_worker_fails_readyz_or_reports_the_pause_as_configured() -> None:
    # Given a worker with every queue it consumes paused by an operator
    hold = Hold(scope=EVERYTHING, paused_by="ann", reason="deploy", paused_at=time.time() - 5)
    monitor = StandIn(view(scope=EVERYTHING, holds=(hold,), since=hold.paused_at))
    probe = Request(method="GET", path="/readyz", headers={}, body=b"", host="127.0.0.1")

    # When probed with the default (fail), Then it is not ready: a load balancer drains it
    failing = Probes(monitor)(probe)  # type: ignore[arg-type]
    assert (failing.status, body(failing)["ready"], body(failing)["paused"]) == (503, False, True)

    # When probed with pause_readyz_when_paused = "report", Then it stays ready and says why
    reporting = Probes(monitor, report_pause=True)(probe)  # type: ignore[arg-type]
    doc = body(reporting)
    assert (reporting.status, doc["ready"], doc["paused"]) == (200, True, True)
    assert (doc["reason"], doc["paused_by"], doc["paused_queues"]) == ("deploy", "ann", ["a", "b"])


def test_not_connected_is_not_ready_and_a_stalled_loop_is_not_alive() -> None:
    # Given a worker not connected to its broker, When probed, Then not ready
    response = get(StandIn(view(connected=False)), "/readyz")
    assert (response.status, body(response)["ready"]) == (503, False)

    # Given a worker whose loop stalled, When probed, Then not alive, with the reason
    stalled = StandIn(view(), alive=(False, "the consumer loop has not run for 200s"))
    response = get(stalled, "/healthz")
    assert response.status == 503
    assert body(response)["reason"] == "the consumer loop has not run for 200s"


def test_metrics_without_prometheus_client_answer_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given prometheus_client cannot be imported
    monkeypatch.setitem(sys.modules, "prometheus_client", None)

    # When /metrics is asked for, Then 501 names the extra to install
    response = get(StandIn(view()), "/metrics")
    assert response.status == 501
    assert b"pip install 'celery-pause[metrics]'" in response.body


def test_only_get_and_known_paths() -> None:
    assert get(StandIn(view()), "/nothing").status == 404
    probes = Probes(StandIn(view()))  # type: ignore[arg-type]
    post = probes(Request(method="POST", path="/healthz", headers={}, body=b"", host=""))
    assert post.status == 405


def config(**settings: Any) -> PauseConfig:
    app = Celery("settings-test", set_as_current=False)
    app.conf.update(broker_url="redis://127.0.0.1:6379/14", **settings)
    return PauseConfig.from_app(app)


def test_settings_have_explicit_defaults() -> None:
    defaults = config()
    assert defaults.http_port is None
    assert defaults.http_host == "127.0.0.1"
    assert defaults.warn_after == 3600.0
    assert defaults.warn_every == 900.0
    assert defaults.history_size == 500
    assert defaults.health_stall_after == 120.0
    assert config(pause_http_port="8080").http_port == 8080
    assert config(pause_http_port=0).http_port == 0
    assert config(pause_warn_after=None).warn_after is None
    assert defaults.green_loop_wait == 0.25
    assert config(pause_green_loop_wait=5).green_loop_wait == 2.0  # Celery's own wait


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("pause_http_port", "eighty", "port number"),
        ("pause_http_port", 70000, "0-65535"),
        ("pause_http_port", True, "port number"),
        ("pause_warn_after", 0, "positive"),
        ("pause_warn_every", "often", "number"),
        ("pause_history_size", 0, "at least 1"),
        ("pause_history_size", 2.5, "whole number"),
        ("pause_green_loop_wait", -1, "positive"),
        ("pause_ramp_peak", 0, "positive"),
        ("pause_ramp_peak", float("inf"), "at most 1e+06"),
        ("pause_ramp_peak", 2e6, "at most 1e+06"),
    ],
)
def test_bad_settings_are_named(setting: str, value: Any, says: str) -> None:
    with pytest.raises(ConfigurationError, match=setting) as caught:
        config(**{setting: value})
    assert says in str(caught.value)
