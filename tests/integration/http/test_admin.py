"""The admin API: authentication, pause and resume over HTTP, bad input, and `pause serve`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner

import celery_pause
from celery_pause.cli.serve import serve
from celery_pause.http.server import MAX_BODY
from support.admin import AUTH, TOKEN, admin_server
from support.harness import ROOT, Cluster
from support.webclient import call


@pytest.fixture
def admin(redis_cluster: Cluster) -> Iterator[str]:
    with admin_server(redis_cluster.app) as url:
        yield url


def test_every_endpoint_refuses_a_missing_or_wrong_token(
    redis_cluster: Cluster, admin: str
) -> None:
    # Given an admin API with a token
    attempts = [
        {},
        {"Authorization": "Bearer wrong-token-wrong-token"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
    ]
    for headers in attempts:
        # When a request comes without the right bearer token
        replies = [
            call(admin + "/status", headers=headers),
            call(admin + "/pause", method="POST", body={"reason": "x"}, headers=headers),
            call(admin + "/resume", method="POST", body={}, headers=headers),
        ]

        # Then it is refused with 401 and a challenge, and nothing changes
        for reply in replies:
            assert reply.status == 401, (headers, reply)
            assert reply.headers["WWW-Authenticate"].startswith("Bearer")
            assert "Bearer" in reply.json()["error"]
    assert not celery_pause.status(redis_cluster.app).paused
    assert celery_pause.history(redis_cluster.app) == []

    # ... while the right token is let in
    assert call(admin + "/status", headers=AUTH).status == 200


def test_pause_status_and_resume_over_http(redis_cluster: Cluster, admin: str) -> None:
    # Given a running cluster, three tasks waiting in its queue
    for n in range(3):
        redis_cluster.send(f"waiting{n}")
    doc = call(admin + "/status", headers=AUTH).json()
    assert (doc["state"], doc["holds"], doc["history"]) == ("RUNNING", [], [])
    assert {
        "name": redis_cluster.queue(),
        "waiting": 3,
        "paused": False,
        "partly_paused": False,
    } in doc["queues"]

    # When one queue is paused with the CLI's option names
    reply = call(
        admin + "/pause",
        method="POST",
        headers=AUTH,
        body={"reason": "db upgrade", "by": "ann@ops", "queues": "emails", "resume_after": "30m"},
    )

    # Then the hold is recorded, and status shows a partial pause with its history
    assert reply.status == 200, reply.body
    paused = reply.json()
    assert paused["paused"] == ["emails"]
    assert paused["hold"]["resume_at"] - paused["hold"]["paused_at"] == pytest.approx(1800)
    doc = call(admin + "/status", headers=AUTH).json()
    assert doc["state"] == "PARTIAL"
    assert doc["paused_queues"] == ["emails"]
    [hold] = doc["holds"]
    assert (hold["reason"], hold["paused_by"], hold["source"]) == (
        "db upgrade",
        "ann@ops",
        "manual",
    )
    assert [(e["action"], e["by"]) for e in doc["history"]] == [("pause", "ann@ops")]

    # When all queues are paused over it without force, Then 409 says who holds them
    conflict = call(admin + "/pause", method="POST", headers=AUTH, body={"reason": "deploy"})
    assert conflict.status == 409
    assert "already paused" in conflict.json()["error"]
    assert conflict.json()["holds"][0]["paused_by"] == "ann@ops"

    # When forced, Then everything is paused
    forced = call(admin + "/pause", method="POST", headers=AUTH, body={"force": True, "by": "bob"})
    assert forced.status == 200
    assert [h["id"] for h in forced.json()["replaced"]] == [hold["id"]]
    assert call(admin + "/status", headers=AUTH).json()["state"] == "PAUSED"

    # When resumed, Then the queues flow and the history says who resumed
    resumed = call(admin + "/resume", method="POST", headers=AUTH, body={"by": "cy@ops"})
    assert resumed.status == 200
    assert resumed.json()["flowing"] is True
    doc = call(admin + "/status", headers=AUTH).json()
    assert doc["state"] == "RUNNING"
    assert [(e["action"], e["by"]) for e in doc["history"]] == [
        ("resume", "cy@ops"),
        ("pause", "bob"),
        ("pause", "ann@ops"),
    ]


def test_throttle_over_http_is_shown_and_lifted(redis_cluster: Cluster, admin: str) -> None:
    # When a queue is throttled with the CLI's option names
    reply = call(
        admin + "/throttle",
        method="POST",
        headers=AUTH,
        body={"queues": "emails", "rate": "10/s", "concurrency": 3, "by": "ann@ops"},
    )

    # Then the limit is recorded, and status shows it with how much of it is used
    assert reply.status == 200, reply.body
    hold = reply.json()["hold"]
    assert (hold["queues"], hold["rate"], hold["concurrency"]) == (["emails"], 10.0, 3)
    doc = call(admin + "/status", headers=AUTH).json()
    assert doc["state"] == "RUNNING" and doc["paused_queues"] == []
    assert doc["limits"] == [{"id": hold["id"], "running": 0, "booked": 0.0}]

    # When the same queue is throttled again, Then the dial turns: the first is replaced
    again = call(
        admin + "/throttle", method="POST", headers=AUTH, body={"queues": "emails", "rate": 20}
    )
    assert [h["id"] for h in again.json()["replaced"]] == [hold["id"]]

    # When resumed, Then no limit is left
    resumed = call(admin + "/resume", method="POST", headers=AUTH, body={"queues": "emails"})
    assert resumed.status == 200 and resumed.json()["flowing"] is True
    assert call(admin + "/status", headers=AUTH).json()["limits"] == []


def test_labels_and_limits_per_label_over_http(redis_url: str, tmp_path: Path) -> None:
    cluster = Cluster(broker=redis_url, tmp=tmp_path, pause_labels={"tenant": "tenant_id"})
    try:
        with admin_server(cluster.app) as admin:
            # When one tenant is paused and every tenant limited, by the admin API
            paused = call(
                admin + "/pause",
                method="POST",
                headers=AUTH,
                body={"labels": "tenant=acme", "reason": "their API is down", "by": "ann"},
            )
            limited = call(
                admin + "/throttle",
                method="POST",
                headers=AUTH,
                body={"concurrency": 2, "per": "tenant", "by": "ann"},
            )

            # Then both holds are recorded with their label, in status and history
            assert (paused.status, limited.status) == (200, 200), (paused.body, limited.body)
            assert paused.json()["hold"]["labels"] == ["tenant=acme"]
            assert limited.json()["hold"]["per"] == "tenant"
            doc = call(admin + "/status", headers=AUTH).json()
            by_id = {hold["id"]: hold for hold in doc["holds"]}
            assert by_id[paused.json()["hold"]["id"]]["labels"] == ["tenant=acme"]
            assert by_id[limited.json()["hold"]["id"]]["per"] == "tenant"
            assert [(e["action"], e.get("labels"), e.get("per")) for e in doc["history"]] == [
                ("throttle", None, "tenant"),
                ("pause", ["tenant=acme"], None),
            ]

            # When the tenant is resumed by its label, Then the limit over every tenant
            # refuses it as a wider hold would (the partial-resume rules), changing nothing
            refused = call(
                admin + "/resume", method="POST", headers=AUTH, body={"labels": "tenant=acme"}
            )
            assert refused.status == 400 and "per tenant" in refused.json()["error"]
            assert len(call(admin + "/status", headers=AUTH).json()["holds"]) == 2

            # When the limit is lifted by its id, Then the tenant resumes by its label
            lift = {"hold": limited.json()["hold"]["id"]}
            assert call(admin + "/resume", method="POST", headers=AUTH, body=lift).status == 200
            resumed = call(
                admin + "/resume", method="POST", headers=AUTH, body={"labels": "tenant=acme"}
            )
            assert resumed.status == 200, resumed.body
            assert call(admin + "/status", headers=AUTH).json()["holds"] == []
    finally:
        cluster.close()


@pytest.mark.parametrize(
    ("path", "body", "status", "says"),
    [
        ("/pause", b"{not json", 400, "not valid JSON"),
        ("/pause", b"[1, 2]", 400, "JSON object"),
        ("/pause", b'{"reasons": "typo"}', 400, "unknown field(s) reasons"),
        ("/pause", b'{"resume_after": "soon"}', 400, "not a duration"),
        ("/pause", b'{"resume_after": "1h", "resume_at": "2030-01-01T00:00Z"}', 400, "not both"),
        ("/pause", b'{"resume_at": "tomorrow"}', 400, "ISO 8601"),
        ("/pause", b'{"queues": [1]}', 400, "queues"),
        ("/pause", b'{"force": "yes"}', 400, "force must be true or false"),
        ("/pause", b'{"reason": "' + b"x" * 1001 + b'"}', 400, "reason longer"),
        ("/resume", b'{"reason": "no such option"}', 400, "unknown field(s) reason"),
        ("/throttle", b'{"queues": "emails"}', 400, "give a rate"),
        ("/throttle", b'{"rate": "0/s"}', 400, "rate must be above 0"),
        ("/throttle", b'{"rate": "ten"}', 400, "not a rate"),
        ("/throttle", b'{"concurrency": 0}', 400, "concurrency must be a whole number"),
        ("/throttle", b'{"rate": "5/s", "beat": "skip"}', 400, "unknown field(s) beat"),
        ("/throttle", b'{"rate": "5/s", "per": "tenant"}', 400, "names no label"),
        ("/pause", b'{"reason": "' + b"x" * MAX_BODY + b'"}', 413, "request body over"),
    ],
    ids=[
        "not-json",
        "not-object",
        "unknown-field",
        "bad-duration",
        "after-and-at",
        "bad-date",
        "bad-queues",
        "bad-force",
        "long-reason",
        "resume-unknown-field",
        "throttle-no-limit",
        "throttle-zero-rate",
        "throttle-bad-rate",
        "throttle-zero-concurrency",
        "throttle-beat",
        "throttle-per-no-label",
        "huge-body",
    ],
)
def test_bad_input_gets_a_clear_error_and_changes_nothing(
    redis_cluster: Cluster, admin: str, path: str, body: bytes, status: int, says: str
) -> None:
    # When a bad body is posted
    headers = {**AUTH, "Content-Type": "application/json"}
    reply = call(admin + path, method="POST", raw=body, headers=headers)

    # Then the error says what is wrong, and the state is untouched
    assert reply.status == status
    assert says in reply.json()["error"]
    assert not celery_pause.status(redis_cluster.app).paused


def test_wrong_methods_types_and_paths(redis_cluster: Cluster, admin: str) -> None:
    # When a form post (a browser's cross-site default) reaches /pause
    form = {**AUTH, "Content-Type": "application/x-www-form-urlencoded"}
    reply = call(admin + "/pause", method="POST", raw=b"reason=x", headers=form)

    # Then it is refused: only JSON bodies are accepted
    assert reply.status == 415
    assert not celery_pause.status(redis_cluster.app).paused

    # And wrong methods and paths say what exists
    assert call(admin + "/pause", headers=AUTH).status == 405
    assert call(admin + "/status", method="POST", body={}, headers=AUTH).status == 405
    assert call(admin + "/nothing", headers=AUTH).status == 404


def test_the_page_is_served_without_state_and_with_a_strict_policy(admin: str) -> None:
    # When the page and its script are fetched without a token
    page = call(admin + "/")
    script = call(admin + "/page.js")

    # Then they are served (they hold no state) with a content security policy
    assert page.status == 200
    assert page.headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert b'id="pause-form"' in page.body and b'id="resume-form"' in page.body
    assert script.status == 200
    assert b"textContent" in script.body and b"innerHTML" not in script.body


def test_without_a_token_only_loopback_host_names_are_answered(redis_cluster: Cluster) -> None:
    # Given an admin API started without authentication (loopback only)
    with admin_server(redis_cluster.app, token=None) as url:
        port = url.rsplit(":", 1)[1]

        # When a request names this machine, Then it is answered
        assert call(url + "/status").status == 200
        assert call(url + "/status", headers={"Host": f"localhost:{port}"}).status == 200

        # When a page rebinds its own name to 127.0.0.1, Then it is refused
        evil = call(url + "/pause", method="POST", body={}, headers={"Host": "evil.example"})
        assert evil.status == 403
        assert not celery_pause.status(redis_cluster.app).paused


def cli_context(app: Celery) -> CLIContext:
    return CLIContext(app=app, no_color=True, workdir=None, quiet=True)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "needs a token"),
        (["--no-auth", "--host", "0.0.0.0"], "loopback address only"),
        (["--token-file", "{missing}"], "cannot read the token file"),
        (["--token-file", "{short}"], "too short"),
        (["--token-file", "{good}", "--no-auth"], "not both"),
    ],
)
def test_serve_refuses_to_start_without_safe_authentication(
    redis_cluster: Cluster, tmp_path: Path, args: list[str], says: str
) -> None:
    # Given token files: a missing one, a short one and a good one
    files = {"missing": tmp_path / "missing", "short": tmp_path / "short", "good": tmp_path / "ok"}
    files["short"].write_text("abc\n")
    files["good"].write_text(TOKEN)

    # When serve is started with unsafe or broken authentication
    argv = [arg.format(**files) for arg in args]
    result = CliRunner().invoke(serve, argv, obj=cli_context(redis_cluster.app))

    # Then it refuses with a usage error that says why
    assert result.exit_code == 2, result.output
    assert says in result.output


def test_celery_pause_serve_runs_until_terminated(redis_cluster: Cluster, tmp_path: Path) -> None:
    # Given a token file and the serve command in Celery's own command line
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    script = (
        "import sys\n"
        "from celery.bin.celery import main\n"
        "from celery.bin.celery import celery as group\n"
        "from celery_pause.cli.serve import serve\n"
        "group.add_command(serve)\n"
        "sys.exit(main())\n"
    )
    env = {
        **os.environ,
        "PAUSE_TEST_NAMESPACE": redis_cluster.namespace,
        "PAUSE_TEST_BROKER": redis_cluster.broker,
        "PAUSE_TEST_STORE": redis_cluster.store_url,
        "PYTHONPATH": str(ROOT),
    }
    argv = [sys.executable, "-c", script, "-A", "support.proj", "serve", "--port", "0"]
    proc = subprocess.Popen(
        [*argv, "--token-file", str(token_file)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # When it starts, Then it says where it serves and answers with the token
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert "bearer token required" in banner, banner
        url = banner.split(" on ", 1)[1].split("/ ", 1)[0]
        reply = call(url + "/status", headers=AUTH)
        assert reply.status == 200
        assert reply.json()["store"] == celery_pause.status(redis_cluster.app).store
        assert call(url + "/status").status == 401

        # When it is terminated, Then it stops cleanly
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert "stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_queue_depths_and_an_anonymous_caller(cluster: Cluster) -> None:
    # Given two tasks waiting in the cluster's queue, on either broker
    for n in range(2):
        cluster.send(f"waiting{n}")
    with admin_server(cluster.app) as admin:
        # When a queue nobody declared is paused without naming who did it
        reply = call(admin + "/pause", method="POST", headers=AUTH, body={"queues": ["ghost"]})
        assert reply.status == 200

        # Then the hold names the admin API and the caller's address
        assert reply.json()["hold"]["paused_by"] == "admin-api@127.0.0.1"

        # ... and the status counts the waiting tasks
        queues = {q["name"]: q for q in call(admin + "/status", headers=AUTH).json()["queues"]}
    assert queues[cluster.queue()] == {
        "name": cluster.queue(),
        "waiting": 2,
        "paused": False,
        "partly_paused": False,
    }
    # a queue the broker does not know holds nothing
    assert queues["ghost"] == {
        "name": "ghost",
        "waiting": 0,
        "paused": True,
        "partly_paused": False,
    }
