"""Services the suite needs: skipped on a laptop without them, a failure in CI."""

from __future__ import annotations

import os

import pytest

from support.harness import answers


def require(service: str, host: str, port: int) -> None:
    """Skip without the service on a laptop; fail in CI, where it must be there."""
    if answers(host, port):
        return
    message = f"{service} is not answering on {host}:{port}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must start it)")
    pytest.skip(message)
