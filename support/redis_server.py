"""A private ``redis-server`` (``harness.redis_server``) with its URLs and a client, for
tests and the benchmark that must not share a server: counting its commands, requiring
a password, dropping connections, shortening kombu's visibility timeout."""

from __future__ import annotations

import shutil
import uuid
from contextlib import ExitStack
from types import TracebackType

import redis

from .harness import free_port, redis_server


class RedisServer:
    """``with RedisServer() as server:`` runs one password-protected server for the block."""

    def __init__(self, *, password: str | None = None, args: tuple[str, ...] = ()) -> None:
        self.password = password or uuid.uuid4().hex
        self.args = args
        self.port = free_port()
        self._running = ExitStack()

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def url(self, db: int = 0, *, password: str | None = None) -> str:
        return f"redis://:{password or self.password}@127.0.0.1:{self.port}/{db}"

    def client(self, db: int = 0) -> redis.Redis:
        return redis.Redis.from_url(self.url(db))

    def pid(self) -> int:
        """The server's process id."""
        return int(self.client().info("server")["process_id"])

    def restart(self) -> None:
        """Stop the server and start a new one on the same port: it keeps nothing on disk,
        so it comes back empty, as a Redis without persistence does after a restart."""
        self._running.close()
        self._running = ExitStack()
        self._running.enter_context(redis_server(self.port, self.password, *self.args))

    def __enter__(self) -> RedisServer:
        self._running.enter_context(redis_server(self.port, self.password, *self.args))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._running.close()
