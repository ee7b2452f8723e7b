"""A local SQS: ``moto_server`` on a free port, and a broker on it for the SQS cell."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .harness import answers, free_port, wait_for
from .processes import track

ACCOUNT = "123456789012"
"""moto's default account: the middle of every queue URL."""
NEEDED = ("moto", "boto3", "pycurl")
"""What the SQS cell needs: the server, and kombu's SQS transport (``kombu[sqs]``)."""
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def require_sqs() -> None:
    """Skip without moto and kombu's SQS transport on a laptop; fail in CI, which has them
    (the ``test`` extra installs them)."""
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if not missing:
        return
    message = f"the SQS cell needs {', '.join(missing)}: pip install 'moto[server]' 'kombu[sqs]'"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must install them)")
    pytest.skip(message)


@dataclass(frozen=True)
class Sqs:
    """A running moto SQS server."""

    port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def broker(self) -> str:
        """The broker URL: kombu takes the endpoint from its host and port."""
        return f"sqs://testing:testing@127.0.0.1:{self.port}"

    def create_queue(self, name: str, *, visibility_timeout: int) -> dict[str, Any]:
        """Create ``name`` with its own visibility timeout; its ``predefined_queues`` entry."""
        import boto3

        client = boto3.client("sqs", endpoint_url=self.endpoint, **_credentials())
        url = client.create_queue(
            QueueName=name, Attributes={"VisibilityTimeout": str(visibility_timeout)}
        )["QueueUrl"]
        return {
            "url": url,
            "access_key_id": AWS_ENV["AWS_ACCESS_KEY_ID"],
            "secret_access_key": AWS_ENV["AWS_SECRET_ACCESS_KEY"],
            "visibility_timeout": visibility_timeout,
        }

    def transport_options(self, queues: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """``broker_transport_options`` for these predefined queues, polling fast."""
        return {
            "predefined_queues": queues,
            "region": AWS_ENV["AWS_DEFAULT_REGION"],
            "is_secure": False,
            "wait_time_seconds": 1,
            "polling_interval": 0.2,
        }


def _credentials() -> dict[str, str]:
    return {
        "region_name": AWS_ENV["AWS_DEFAULT_REGION"],
        "aws_access_key_id": AWS_ENV["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    }


@contextmanager
def moto_sqs(log: Path) -> Iterator[Sqs]:
    """``moto_server`` on a free port for as long as the block runs (its output to ``log``)."""
    require_sqs()
    port = free_port()
    command = shutil.which("moto_server")
    argv = [command] if command else [sys.executable, "-m", "moto.server"]
    with open(log, "ab") as out:
        server = subprocess.Popen(
            [*argv, "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **AWS_ENV},
            start_new_session=True,
        )
    track(server)
    try:
        wait_for(lambda: answers("127.0.0.1", port), timeout=30, what="moto_server to listen")
        yield Sqs(port)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
