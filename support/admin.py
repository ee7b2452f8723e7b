"""The admin API on a free loopback port, and the token the tests give it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from celery import Celery

from celery_pause.http.admin import make_admin_app
from celery_pause.http.server import Server

TOKEN = "s3cret-token-for-the-admin-api"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@contextmanager
def admin_server(app: Celery, token: str | None = TOKEN) -> Iterator[str]:
    """The admin API for ``app`` on a free loopback port; yields its base URL."""
    server = Server(
        make_admin_app(app, token=None if token is None else token.encode()),
        "127.0.0.1",
        0,
        name="test-admin",
    ).start()
    try:
        yield server.url
    finally:
        server.close()
