"""Redis Cluster store: the Redis store's code on redis-py's ``RedisCluster``.

``redis+cluster://[user:password@]host:port[,host:port…]`` names one or more of the cluster's
nodes (any: the client asks them for the others and for who holds which slot);
``rediss+cluster://`` speaks TLS, and the query takes redis-py's URL options
(``?ssl_cert_reqs=none``). A cluster has only database 0.

Where the keys go: ``{<prefix>}:state`` and ``{<prefix>}:workers`` share one hash tag, so one
primary holds what a status reads (one round trip) and a state change is a ``WATCH``/``MULTI``
transaction there. Every record is a key of its own, ``<prefix>:record:<key>``, hashed on its
whole name (no tag), so the records of the limits, of every label's partitions, and the logs,
event windows and leases built on records, spread over the primaries. Every operation changes
one key: none spans slots. A change of the state waits for a replica (``WAIT``,
``wait_replicas`` in the transport options, default 1) as the Sentinel store does. Needs
redis-py 6.1 or later (transactions in cluster mode).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast
from urllib.parse import SplitResult, urlsplit

import redis
import redis.cluster
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import Script
from redis.connection import parse_url
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from ..errors import ConfigurationError
from .base import bad_url
from .redis import RESP2, BaseRedisStore

SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""The store's schemes, and the Redis URL scheme whose options each takes."""
CLOCK = "return redis.call('TIME')"
"""``TIME`` as a script of one key: a cluster's transaction sends only commands with keys."""


class RedisClusterStore(BaseRedisStore):
    """The state, reports and records as :class:`~.redis.RedisStore` keeps them (its state
    and reports under the hash tag ``{<prefix>}``), the records listed by a ``SCAN`` of every
    primary."""

    def __init__(
        self, url: str, prefix: str, *, options: Mapping[str, Any], timeout: float = 2.0
    ) -> None:
        nodes, kwargs = parse(url)
        if not hasattr(redis.cluster, "TransactionStrategy"):
            raise bad_url(
                url,
                "needs a redis-py whose cluster client runs WATCH/MULTI transactions (6.1 or "
                f"later; this is {redis.__version__}): pip install -U redis",
            )
        replicas = options.get("wait_replicas", 1)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ConfigurationError(f"wait_replicas must be 0 or more, got {replicas!r}")
        # As from_url does, the URL's own options win (?protocol=3, ?socket_timeout=…).
        kwargs = {"socket_timeout": timeout, "socket_connect_timeout": timeout, **RESP2, **kwargs}
        self.lazy = LazyCluster(
            lambda: RedisCluster(
                startup_nodes=[
                    ClusterNode(host, port)  # type: ignore[no-untyped-call]
                    for host, port in nodes
                ],
                require_full_coverage=False,  # the slots still served while one shard fails over
                # No retry: redis-py resends a transaction's command after a reconnect without
                # its WATCH, which could commit over a change; the caller's next try re-reads.
                retry=Retry(NoBackoff(), 0),
                **kwargs,
            )
        )
        super().__init__(
            url, prefix, timeout=timeout, client=cast(redis.Redis, self.lazy), replicas=replicas
        )
        self.state_key = f"{{{prefix}}}:state"
        self.workers_key = f"{{{prefix}}}:workers"

    @classmethod
    def open(
        cls, url: str, prefix: str, *, timeout: float, options: Mapping[str, Any]
    ) -> RedisClusterStore:
        return cls(url, prefix, options=options, timeout=timeout)

    @property
    def cluster(self) -> RedisCluster:
        """The cluster's client (made at its first use)."""
        return self.lazy.instance()

    def _server(self) -> redis.Redis:
        """The primary that holds the state's slot, as it is known now."""
        try:
            node = self.cluster.get_node_from_key(self.state_key)  # type: ignore[no-untyped-call]
            return self.cluster.get_redis_connection(node)
        except RedisClusterException as exc:
            raise redis.ConnectionError(str(exc)) from None

    def _time(self, client: redis.Redis, key: str) -> float:
        # EVAL as a command: redis-py's cluster pipeline has no eval() of its own
        seconds, micros = client.execute_command("EVAL", CLOCK, 1, key)  # type: ignore[no-untyped-call]
        return float(seconds) + int(micros) / 1e6

    def _read_many(self, names: list[str]) -> list[bytes | str | None]:
        """``MGET`` per slot (redis-py's ``mget_nonatomic``, one round trip per primary)."""
        return list(self.cluster.mget_nonatomic(names))

    def close(self) -> None:
        self.lazy.close()

    @contextmanager
    def _failing(self) -> Iterator[None]:
        """Also redis-py's cluster errors (no slot covered, no node reached) as ``StoreError``."""
        try:
            with super()._failing():
                yield
        except RedisClusterException as exc:
            raise self.failed(exc) from None


class LazyCluster:
    """A :class:`RedisCluster` made at its first use: opening the store reaches no node, as
    a Redis URL does not, so a worker starts (and holds its queues) while the cluster is down.
    Everything else is the cluster client's; a failure to reach it is a ``ConnectionError``."""

    def __init__(self, make: Callable[[], RedisCluster]) -> None:
        self._make = make
        self._client: RedisCluster | None = None
        self._lock = threading.Lock()

    def instance(self) -> RedisCluster:
        """The client, made now unless it was before."""
        made = self._client
        if made is not None:
            return made
        with self._lock:
            if self._client is None:
                try:
                    self._client = self._make()
                except RedisClusterException as exc:
                    raise redis.ConnectionError(str(exc)) from None
            return self._client

    def register_script(self, script: str) -> Script:
        """A script run on the client once it is made (its SHA needs no connection)."""
        return Script(cast(RedisCluster, self), script.encode())

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.instance(), name)


def parse(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """The nodes a cluster URL names, and redis-py's connection options of its user,
    password, TLS and query; :class:`ConfigurationError` for a URL that is not one."""
    scheme = url.partition("://")[0]
    if scheme not in SCHEMES:
        raise bad_url(url, "is not a Redis Cluster URL: redis+cluster://host:port[,host:port…]")
    split = urlsplit(url)
    userinfo, _, hosts = split.netloc.rpartition("@")
    nodes = [_node(url, part.strip()) for part in hosts.split(",") if part.strip()]
    if not nodes:
        raise bad_url(url, "names no node")
    login = f"{userinfo}@" if userinfo else ""
    single = SplitResult(SCHEMES[scheme], f"{login}{hosts.split(',')[0]}", *split[2:])
    try:
        kwargs = parse_url(single.geturl())  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise bad_url(url, f"is not a Redis Cluster URL: {exc}") from None
    if kwargs.pop("db", 0) != 0:
        raise bad_url(url, "names a database: a Redis Cluster has only database 0")
    for key in ("host", "port", "connection_class"):
        kwargs.pop(key, None)
    if scheme == "rediss+cluster":
        kwargs["ssl"] = True
    return nodes, kwargs


def _node(url: str, part: str) -> tuple[str, int]:
    try:
        split = urlsplit(f"//{part}")
        port = split.port or 6379
    except ValueError as exc:
        raise bad_url(url, f"is not a Redis Cluster URL: {exc}") from None
    if not split.hostname or split.path:
        raise bad_url(url, f"is not a Redis Cluster URL: {part!r} is no host:port")
    return split.hostname, port
