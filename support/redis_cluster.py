"""A private Redis Cluster on free loopback ports: three masters and three replicas, each a
``redis-server --cluster-enabled yes`` with a password, joined by ``redis-cli --cluster
create``. :func:`shared_cluster` runs one for the whole test run (the contract suite and the
worker tests), stopped at exit; a test that fails a master over runs its own."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from contextlib import suppress
from functools import partial
from pathlib import Path
from types import TracebackType

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from .harness import answers, free_port, wait_for
from .processes import track

MASTERS = 3


class ClusterSetup:
    """``with ClusterSetup(tmp) as setup:`` a cluster of 3 masters, each with a replica."""

    def __init__(self, tmp: Path, *, node_timeout_ms: int = 5000) -> None:
        self.tmp = tmp
        self.node_timeout_ms = node_timeout_ms
        self.password = uuid.uuid4().hex
        self.ports = [cluster_port() for _ in range(2 * MASTERS)]
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    @staticmethod
    def available() -> bool:
        return all(shutil.which(tool) for tool in ("redis-server", "redis-cli"))

    @property
    def url(self) -> str:
        """The store URL: the password and the first three nodes (the client finds the rest)."""
        nodes = ",".join(f"127.0.0.1:{port}" for port in self.ports[:MASTERS])
        return f"redis+cluster://:{self.password}@{nodes}"

    def node(self, port: int) -> redis.Redis:
        """A plain client of one node."""
        return redis.Redis(port=port, password=self.password, socket_timeout=5)

    def client(self) -> RedisCluster:
        """A cluster client of its own (not the store's)."""
        nodes = [ClusterNode("127.0.0.1", port) for port in self.ports]  # type: ignore[no-untyped-call]
        return RedisCluster(startup_nodes=nodes, password=self.password, socket_timeout=5)

    def primary_of(self, key: str) -> int:
        """The port of the master that serves ``key``'s slot, asked of a live node."""
        slot = key_slot(key.encode())
        for port in self.live():
            try:
                slots = self.node(port).execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
            except redis.RedisError:
                continue
            for start, end, master, *_ in slots:
                if start <= slot <= end:
                    return int(master[1])
        raise AssertionError(f"no node knows who serves {key!r}")

    def replica_get(self, port: int, key: str) -> bytes | None:
        """``GET`` on the replica on ``port`` (``READONLY``: a replica answers for its slots)."""
        replica = redis.Redis(
            port=port, password=self.password, socket_timeout=5, single_connection_client=True
        )
        try:
            replica.execute_command("READONLY")  # type: ignore[no-untyped-call]
            return replica.get(key)  # type: ignore[return-value]
        finally:
            replica.close()

    def role(self, port: int) -> str:
        return str(self.node(port).info("replication")["role"])

    def replica_of(self, port: int) -> int:
        """The port of the replica of the master on ``port``."""
        [replica] = [
            p for p in self.live() if p != port and self.master_port(p) == port
        ]  # one replica each
        return replica

    def master_port(self, port: int) -> int | None:
        info = self.node(port).info("replication")
        return int(info["master_port"]) if info["role"] == "slave" else None

    def live(self) -> list[int]:
        return [port for port, proc in self._procs.items() if proc.poll() is None]

    def kill(self, port: int) -> None:
        """SIGKILL one node, as a host that died: no goodbye to the others."""
        proc = self._procs[port]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def wait_promoted(self, port: int, timeout: float = 30) -> None:
        """Wait until the replica on ``port`` is a master, and every live node says so and
        says the cluster is whole again (``cluster_state:ok``)."""
        wait_for(lambda: self.role(port) == "master", timeout=timeout, what="a replica promoted")

        def agreed() -> bool:
            live = set(self.live())
            views = [(self._ok(p), self._masters(p)) for p in live]
            return all(ok and port in masters and masters <= live for ok, masters in views)

        wait_for(agreed, timeout=timeout, what="every node to know the new master")

    def _masters(self, port: int) -> set[int]:
        """The ports of the masters the node on ``port`` says serve slots."""
        slots = self.node(port).execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
        return {int(master[1]) for _, _, master, *_ in slots}

    def _ok(self, port: int) -> bool:
        info = self.node(port).execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
        text = info.decode() if isinstance(info, bytes) else str(info)
        return "cluster_state:ok" in text

    def _synced(self) -> bool:
        replicas = [p for p in self.ports if self.role(p) == "slave"]
        linked = all(
            self.node(p).info("replication").get("master_link_status") == "up" for p in replicas
        )
        return len(replicas) == MASTERS and linked and all(self._ok(p) for p in self.ports)

    def __enter__(self) -> ClusterSetup:
        self.tmp.mkdir(parents=True, exist_ok=True)
        try:
            for port in self.ports:
                self._start(port)
            for port in self.ports:
                wait_for(partial(answers, "127.0.0.1", port), timeout=10, what="a node")
            nodes = [f"127.0.0.1:{port}" for port in self.ports]
            create = ["redis-cli", "-a", self.password, "--no-auth-warning", "--cluster", "create"]
            subprocess.run(
                [*create, *nodes, "--cluster-replicas", "1", "--cluster-yes"],
                check=True,
                capture_output=True,
                timeout=60,
            )
            wait_for(self._synced, timeout=30, what="the cluster to form and the replicas to sync")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self, port: int) -> None:
        workdir = self.tmp / str(port)
        workdir.mkdir(exist_ok=True)
        command = [
            shutil.which("redis-server") or "redis-server",
            "--port", str(port), "--bind", "127.0.0.1",
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--requirepass", self.password, "--masterauth", self.password,
            "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0",
            "--dir", str(workdir),
        ]  # fmt: skip
        with open(workdir / "redis.log", "wb") as log:
            self._procs[port] = track(subprocess.Popen(command, stdout=log, stderr=log))

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def cluster_port() -> int:
    """A free port whose cluster bus port (10 000 above it) is free too: at most 55535."""
    while True:
        port = free_port()
        if port <= 55535:
            with suppress(OSError), socket.socket() as sock:
                sock.bind(("127.0.0.1", port + 10000))
                return port


_shared: ClusterSetup | None = None


def shared_cluster() -> ClusterSetup:
    """The run's cluster, started at its first use and stopped at exit. Without
    ``redis-server`` the test is skipped (on a laptop) or fails (in CI, which has it)."""
    global _shared
    if _shared is None:
        if not ClusterSetup.available():
            message = "redis-server and redis-cli are not installed"
            if os.environ.get("CI"):
                pytest.fail(f"{message} (CI must have them)")
            pytest.skip(message)
        tmp = Path(tempfile.mkdtemp(prefix="celery-pause-cluster-"))
        setup = ClusterSetup(tmp).__enter__()
        atexit.register(shutil.rmtree, tmp, True)
        atexit.register(setup.__exit__, None, None, None)
        _shared = setup
    return _shared
