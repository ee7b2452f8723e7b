"""A loopback TCP proxy with a blackhole switch, for store calls on a half-open connection.

``with Proxy(port) as proxy:`` forwards ``127.0.0.1:proxy.port`` to ``127.0.0.1:port``.
:meth:`Proxy.blackhole` keeps every connection open but stops forwarding both ways (a
peer that vanished without a FIN or RST: the client's kernel still has its bytes
acknowledged, by the proxy's); :meth:`Proxy.forward` resumes.
"""

from __future__ import annotations

import selectors
import socket
import threading
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

CHUNK = 65536
TICK = 0.05
"""Seconds the proxy's loop waits for traffic before it looks at the switch again."""


def through(url: str, port: int) -> str:
    """``url`` with its server at ``127.0.0.1:port`` (a proxy's)."""
    scheme, _, rest = url.partition("://")
    split = urlsplit(f"x://{rest}")
    userinfo, at, _ = split.netloc.rpartition("@")
    return f"{scheme}://" + urlunsplit(("", f"{userinfo}{at}127.0.0.1:{port}", *split[2:]))[2:]


class Proxy:
    """A thread that forwards loopback connections to ``127.0.0.1:target``."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._stopped = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._peers: dict[socket.socket, socket.socket] = {}
        self._thread = threading.Thread(target=self._run, name="proxy", daemon=True)

    def blackhole(self) -> None:
        """Keep the connections open, forward nothing (new connections are accepted and
        left unanswered too)."""
        self._forwarding.clear()

    def forward(self) -> None:
        """Forward again."""
        self._forwarding.set()

    def __enter__(self) -> Proxy:
        self._listener.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        for sock in [self._listener, *self._peers]:
            sock.close()
        self._selector.close()

    def _run(self) -> None:
        while not self._stopped.is_set():
            if not self._forwarding.is_set():
                self._forwarding.wait(TICK)
                continue
            for key, _ in self._selector.select(TICK):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    self._accept()
                elif sock in self._peers:
                    self._pump(sock)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        try:
            server = socket.create_connection(("127.0.0.1", self.target), timeout=5)
        except OSError:
            client.close()
            return
        for sock in (client, server):
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ)
        self._peers[client], self._peers[server] = server, client

    def _pump(self, sock: socket.socket) -> None:
        other = self._peers[sock]
        try:
            data = sock.recv(CHUNK)
            if data:
                other.setblocking(True)
                other.sendall(data)
                other.setblocking(False)
                return
        except OSError:
            pass
        self._drop(sock, other)

    def _drop(self, *socks: socket.socket) -> None:
        for sock in socks:
            self._peers.pop(sock, None)
            self._selector.unregister(sock)
            sock.close()
