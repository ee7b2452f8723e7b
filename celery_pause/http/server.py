"""A small threaded HTTP server for the worker probes and the admin API.

The standard library's WSGI server (``wsgiref``) with one thread per request,
served from a daemon thread: the same arrangement ``prometheus_client`` uses for
its own ``start_http_server``. It needs no dependency inside a worker, and the
WSGI applications it serves can be mounted under any WSGI server instead.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

logger = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
REQUEST_TIMEOUT = 30.0
REASONS = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}
StartResponse = Callable[[str, list[tuple[str, str]]], Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass(frozen=True)
class Request:
    """What a handler needs from one HTTP request."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    host: str
    remote: str = ""


@dataclass(frozen=True)
class Response:
    """What a handler answers."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = field(default=())


Handler = Callable[[Request], Response]


class BodyTooLarge(Exception):
    """The request body is over :data:`MAX_BODY` bytes."""


def json_response(status: int, data: Any, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    body = json.dumps(data, indent=1, sort_keys=True).encode() + b"\n"
    return Response(status, body, "application/json", (("Cache-Control", "no-store"), *headers))


def wsgi_app(handler: Handler) -> WSGIApp:
    """Turn ``handler`` into a WSGI application; errors become a logged 500."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            response = handler(read_request(environ))
        except BodyTooLarge:
            response = json_response(413, {"error": f"request body over {MAX_BODY} bytes"})
        except Exception:
            logger.exception("celery-pause: error answering %s", environ.get("PATH_INFO"))
            response = json_response(500, {"error": "internal error; see the server's log"})
        headers = [
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(response.body))),
            ("X-Content-Type-Options", "nosniff"),
            *response.headers,
        ]
        start_response(f"{response.status} {REASONS.get(response.status, 'Unknown')}", headers)
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [response.body]

    return app


def read_request(environ: dict[str, Any]) -> Request:
    headers = {
        key[5:].replace("_", "-").lower(): str(value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    if environ.get("CONTENT_TYPE"):
        headers["content-type"] = str(environ["CONTENT_TYPE"])
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > MAX_BODY:
        raise BodyTooLarge
    body = environ["wsgi.input"].read(length) if length > 0 else b""
    return Request(
        method=str(environ.get("REQUEST_METHOD", "GET")).upper(),
        path=str(environ.get("PATH_INFO") or "/"),
        headers=headers,
        body=body,
        host=headers.get("host", ""),
        remote=str(environ.get("REMOTE_ADDR", "")),
    )


class _Handler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("celery-pause http: " + format, *args)


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class Server:
    """A WSGI application served from a daemon thread until :meth:`close`."""

    def __init__(self, app: WSGIApp, host: str, port: int, *, name: str) -> None:
        server_class = _ThreadingServer6 if ":" in host else _ThreadingServer
        self._httpd = make_server(
            host.strip("[]"), port, app, server_class=server_class, handler_class=_Handler
        )
        self.host = host
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2}, name=name, daemon=True
        )

    @property
    def url(self) -> str:
        host = f"[{self.host.strip('[]')}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> Server:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and free the port."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address) only listens on this machine."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        infos = socket.getaddrinfo(name, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)
