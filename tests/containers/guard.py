"""Keep the container tier off the machine's shared Redis and RabbitMQ.

The test process is the tier's only one on the host's network: the brokers and workers run in
containers, whose ``localhost`` is their own and whose URLs name each other by container
hostname. From the test side every broker, backend and store is a container's published port,
never 6379 or 5672. So a connection to port 6379 or 5672 from the test side can only be a
connection to a shared server: :func:`install` refuses it before it is made, and records it, so
that the test (and the session) fails even where a client swallows the error and retries.
"""

from __future__ import annotations

import socket
from typing import Any

SHARED_PORTS = frozenset({6379, 5672})
"""The shared Redis and RabbitMQ of the machine listen here; no container of the tier does."""

attempts: list[str] = []
"""``host:port`` of every refused connection, in order."""

_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex


class SharedServerRefused(ConnectionRefusedError):
    """A connection from the container tier to a shared server, refused by the guard."""


def _check(address: Any) -> None:
    if isinstance(address, tuple) and len(address) >= 2 and address[1] in SHARED_PORTS:
        where = f"{address[0]}:{address[1]}"
        attempts.append(where)
        raise SharedServerRefused(
            f"the container tier tried to reach {where}: a shared server of the machine, "
            "not one of the tier's containers"
        )


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check(address)
    _connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check(address)
    return _connect_ex(self, address)


def install() -> None:
    """Refuse and record, in this process, every TCP connection to a shared server's port."""
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]


def check_port(what: str, port: int) -> None:
    """Refuse to go on if a container's published port is a shared server's."""
    if port in SHARED_PORTS:
        raise RuntimeError(
            f"{what} is published on port {port}, a shared server's: the tier would reach the "
            "machine's own server instead of the container"
        )
