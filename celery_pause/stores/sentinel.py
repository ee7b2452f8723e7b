"""Redis Sentinel store: the Redis store, reached through the sentinels.

``sentinel://host:26379;sentinel://host2:26379/0`` with ``master_name`` in the
transport options, as kombu's ``sentinel://`` broker takes them. Every
connection asks the sentinels for the master, so after a failover the store
follows the new master. A state change is acknowledged only once a replica
holds it too (``WAIT``), so a failover does not lose an acknowledged pause.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..errors import ConfigurationError, StoreError
from .base import bad_url, display
from .redis import RESP2, RedisStore

T = TypeVar("T")
FAILOVER_TRIES = 3
"""Runs of a transaction that a just-demoted master refused, before the error is the caller's."""

SSL_OPTIONS = ("ssl", "ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
OPTIONS = ("master_name", "sentinel_kwargs", "wait_replicas", *SSL_OPTIONS)


class SentinelStore(RedisStore):
    """:class:`RedisStore` on the master that the sentinels name."""

    def __init__(
        self, url: str, prefix: str, *, options: Mapping[str, Any], timeout: float = 2.0
    ) -> None:
        hosts, db, username, password = parse(url)
        master = options.get("master_name")
        if not isinstance(master, str) or not master:
            raise ConfigurationError(
                f"the Sentinel store {display(url)!r} needs master_name in "
                "pause_store_transport_options (or in broker_transport_options when the "
                "broker is the store)"
            )
        sentinel_kwargs = options.get("sentinel_kwargs") or {}
        replicas = options.get("wait_replicas", 1)
        if not isinstance(sentinel_kwargs, dict):
            raise ConfigurationError("sentinel_kwargs must be a dict (password, ssl, …)")
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ConfigurationError(f"wait_replicas must be 0 or more, got {replicas!r}")
        timeouts = {"socket_timeout": timeout, "socket_connect_timeout": timeout, **RESP2}
        # Asking the sentinels tries each in turn: no retries of one that does not answer.
        once = {"retry": Retry(NoBackoff(), 0)}
        # A connection the old master dropped in a failover is made again once, to the
        # master the sentinels name now (redis-py retries none on sentinel-managed pools;
        # a transaction cut off while watching fails as contention and is run again).
        connect: Any = redis.sentinel.Sentinel  # typed from redis-py 8.2 on, untyped before
        sentinel = connect(
            hosts,
            sentinel_kwargs={**timeouts, **once, **sentinel_kwargs},
            db=db,
            username=username,
            password=password,
            retry=Retry(NoBackoff(), 1),
            **timeouts,
            **{key: options[key] for key in SSL_OPTIONS if key in options},
        )
        self.master_name = master
        client: redis.Redis = sentinel.master_for(master)
        super().__init__(url, prefix, timeout=timeout, client=client, replicas=replicas)

    @classmethod
    def open(
        cls, url: str, prefix: str, *, timeout: float, options: Mapping[str, Any]
    ) -> SentinelStore:
        return cls(url, prefix, options=options, timeout=timeout)

    def _transaction(self, work: Callable[[redis.client.Pipeline], T], key: str) -> T:
        """As the Redis store's, but a master demoted by a failover the client has not seen
        yet refuses the write inside the transaction (``READONLY``, then ``EXECABORT``):
        nothing was written, so ask the sentinels for the master again and run it once more."""
        for _ in range(FAILOVER_TRIES - 1):
            try:
                return super()._transaction(work, key)
            except (redis.exceptions.ExecAbortError, redis.exceptions.ReadOnlyError):
                self.client.connection_pool.disconnect()
        return super()._transaction(work, key)

    @contextmanager
    def _failing(self) -> Iterator[None]:
        try:
            with super()._failing():
                yield
        except StoreError as exc:
            if isinstance(exc.__context__, redis.sentinel.MasterNotFoundError):
                raise self.failed(
                    f"no sentinel answered with a master {self.master_name!r}"
                ) from None
            raise


def parse(url: str) -> tuple[list[tuple[str, int]], int, str | None, str | None]:
    """The sentinels' addresses, the database, and the master's user and password."""
    hosts: list[tuple[str, int]] = []
    db, username, password = 0, None, None
    for part in filter(None, (p.strip() for p in url.split(";"))):
        try:
            split = urlsplit(part)
            port = split.port or 26379
        except ValueError as exc:
            raise bad_url(url, f"is not a Sentinel URL: {exc}") from None
        if split.scheme != "sentinel":
            raise bad_url(url, "is not a Sentinel URL: every part must be sentinel://host:port")
        hosts.append((split.hostname or "localhost", port))
        if split.path.strip("/").isdigit():
            db = int(split.path.strip("/"))
        if split.password and password is None:
            username = unquote(split.username) if split.username else None
            password = unquote(split.password)
    if not hosts:
        raise bad_url(url, "names no sentinel")
    return hosts, db, username, password
