"""The tier's guard refuses the machine's shared Redis and RabbitMQ, before connecting."""

from __future__ import annotations

import socket

import pytest
import redis

from . import guard


def test_the_shared_servers_ports_are_refused_and_recorded() -> None:
    # Given the guard the tier installs in its process
    before = len(guard.attempts)

    # When the test side tries the shared Redis (through redis-py) and RabbitMQ (a plain socket)
    with pytest.raises(redis.ConnectionError, match="shared server"):
        redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=1).ping()
    with pytest.raises(guard.SharedServerRefused):
        socket.create_connection(("127.0.0.1", 5672), timeout=1)

    # Then both were refused, every try (redis-py tries again) recorded: that fails the test
    # that made them, and the session
    assert set(guard.attempts[before:]) == {"127.0.0.1:6379", "127.0.0.1:5672"}
    del guard.attempts[before:]  # this test's own, on purpose


def test_a_shared_servers_port_is_refused_for_a_container() -> None:
    # Given a container published on a shared server's port
    # When the tier checks it / Then it refuses to go on
    with pytest.raises(RuntimeError, match="shared server"):
        guard.check_port("the broker container", 6379)
    guard.check_port("the broker container", 32768)
