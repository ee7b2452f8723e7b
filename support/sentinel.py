"""A private Redis master, an optional replica and a sentinel on free loopback ports."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import TracebackType

import redis

from .harness import answers, free_port, wait_for

MASTER = "mymaster"


class SentinelSetup:
    """``with SentinelSetup(tmp) as setup:`` a master (and replica) watched by one sentinel."""

    def __init__(self, tmp: Path, *, replica: bool = True) -> None:
        self.tmp = tmp
        self.master_port = free_port()
        self.replica_port = free_port() if replica else None
        self.sentinel_port = free_port()
        self._procs: list[subprocess.Popen[bytes]] = []

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    @property
    def url(self) -> str:
        return f"sentinel://127.0.0.1:{self.sentinel_port}/0"

    def sentinel(self) -> redis.Redis:
        return redis.Redis(port=self.sentinel_port, socket_timeout=5)

    def master_address(self) -> tuple[str, int]:
        host, port = self.sentinel().sentinel_get_master_addr_by_name(MASTER)  # type: ignore[no-untyped-call]
        return str(host), int(port)

    def failover(self) -> int:
        """Make the replica the master (``SENTINEL FAILOVER``); the new master's port."""
        assert self.replica_port is not None
        self.sentinel().execute_command("SENTINEL", "FAILOVER", MASTER)
        wait_for(
            lambda: self.master_address()[1] == self.replica_port,
            timeout=30,
            what="the sentinel to promote the replica",
        )
        return self.replica_port

    def _server(self, *args: str) -> None:
        command = [shutil.which("redis-server") or "redis-server", *args]
        log = open(self.tmp / f"redis-{len(self._procs)}.log", "wb")  # noqa: SIM115
        self._procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))

    def __enter__(self) -> SentinelSetup:
        self.tmp.mkdir(parents=True, exist_ok=True)
        # Replication writes a snapshot for the replica's first sync: into tmp, not the cwd.
        plain = ("--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(self.tmp))
        self._server("--port", str(self.master_port), *plain)
        wait_for(lambda: answers("127.0.0.1", self.master_port), timeout=10, what="the master")
        if self.replica_port is not None:
            self._server(
                "--port", str(self.replica_port), *plain,
                "--replicaof", "127.0.0.1", str(self.master_port),
            )  # fmt: skip
            replica = redis.Redis(port=self.replica_port)
            wait_for(
                lambda: (
                    answers("127.0.0.1", self.replica_port or 0)
                    and replica.info("replication").get("master_link_status") == "up"
                ),
                timeout=20,
                what="the replica to sync",
            )
        conf = self.tmp / "sentinel.conf"
        conf.write_text(
            f"port {self.sentinel_port}\nbind 127.0.0.1\ndir {self.tmp}\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {self.master_port} 1\n"
            f"sentinel down-after-milliseconds {MASTER} 1000\n"
            f"sentinel failover-timeout {MASTER} 5000\n"
        )
        self._server(str(conf), "--sentinel")
        wait_for(lambda: answers("127.0.0.1", self.sentinel_port), timeout=10, what="sentinel")
        if self.replica_port is not None:
            wait_for(
                lambda: self.sentinel().execute_command("SENTINEL", "REPLICAS", MASTER),
                timeout=20,
                what="the sentinel to find the replica",
            )
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for proc in reversed(self._procs):
            proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
