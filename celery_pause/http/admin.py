"""The admin API and status page: ``celery -A proj pause serve``.

``GET /status`` (JSON), ``POST /pause``, ``POST /throttle`` and ``POST /resume`` (JSON
bodies with the CLI's option names: ``start_at`` and ``beat`` for a pause, ``rate``,
``concurrency``, ``per``, ``cost``, ``adaptive``, ``fair`` and ``weights`` (an object of
values or patterns to weights) for a throttle, ``hold`` to lift one hold),
all behind a bearer token compared in constant time.
``GET /`` serves a status page that asks for the token and then shows the holds,
breakers, workers, queue depths and history, refreshing itself, with pause and
resume forms.

Served by the standard library's WSGI server (see :mod:`celery_pause.http.server`):
three JSON endpoints and one static page need no framework, the package gains no
dependency, and :func:`make_admin_app` is a plain WSGI application that can be
mounted under gunicorn or waitress behind TLS instead.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import threading
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from celery import Celery

from ..api import pause, resume, throttle
from ..api.depths import queue_depths
from ..api.document import overview
from ..errors import AlreadyPaused, ConfigurationError, InvalidInput, PauseError, StoreError
from ..model.coercion import duration, moment, name_list
from ..model.ramp import ramp_json
from ..model.scope import NAMES
from .backlog import render_backlog
from .server import Request, Response, json_response, wsgi_app

logger = logging.getLogger(__name__)

HISTORY_SHOWN = 20
DEPTH_CACHE = 2.0
PAUSE_FIELDS = (
    "reason", "by", *NAMES, "resume_after", "resume_at", "start_at", "beat",
    "force",
)  # fmt: skip
RESUME_FIELDS = (*NAMES, "hold", "force", "by", "ramp")
THROTTLE_FIELDS = (
    "rate", "concurrency", "per", "cost", "adaptive", "fair", "weights", "reason", "by",
    *NAMES, "resume_after", "resume_at", "start_at",
)  # fmt: skip
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/page.js": ("page.js", "text/javascript; charset=utf-8"),
    "/page.css": ("page.css", "text/css; charset=utf-8"),
}
PAGE_HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
)


class AdminAPI:
    """Answers the admin endpoints for ``app``; ``token`` ``None`` means no authentication."""

    def __init__(self, app: Celery, *, token: bytes | None) -> None:
        self.app = app
        self.token = token
        self._depths: tuple[float, dict[str, int | None]] = (float("-inf"), {})
        self._depth_lock = threading.Lock()

    def __call__(self, request: Request) -> Response:
        if request.path in STATIC:
            if request.method not in ("GET", "HEAD"):
                return json_response(405, {"error": "use GET"}, (("Allow", "GET, HEAD"),))
            name, content_type = STATIC[request.path]
            body = resources.files(__package__ or "").joinpath(f"static/{name}").read_bytes()
            return Response(200, body, content_type, PAGE_HEADERS)
        routes: dict[tuple[str, str], Callable[[Request], Response]] = {
            ("GET", "/status"): self.get_status,
            ("GET", "/metrics"): self.get_metrics,
            ("POST", "/pause"): self.post_pause,
            ("POST", "/resume"): self.post_resume,
            ("POST", "/throttle"): self.post_throttle,
        }
        route = routes.get((request.method, request.path))
        if route is None:
            allowed = [method for method, path in routes if path == request.path]
            if allowed:
                return json_response(405, {"error": f"use {allowed[0]}"}, (("Allow", allowed[0]),))
            return json_response(
                404,
                {"error": "try GET /status, GET /metrics, POST /pause, /throttle or /resume"},
            )
        refusal = self.authenticate(request)
        if refusal is not None:
            return refusal
        if request.method == "POST" and not _is_json(request):
            return json_response(
                415, {"error": "send a JSON body (Content-Type: application/json)"}
            )
        try:
            return route(request)
        except InvalidInput as exc:
            return json_response(400, {"error": str(exc)})
        except AlreadyPaused as exc:
            return json_response(
                409, {"error": str(exc), "holds": [h.to_json() for h in exc.holds]}
            )
        except (StoreError, ConfigurationError) as exc:
            return json_response(503, {"error": str(exc)})
        except PauseError as exc:
            return json_response(500, {"error": str(exc)})

    def authenticate(self, request: Request) -> Response | None:
        """``None`` if the request may go on, else the refusal."""
        if self.token is None:
            # No token: served on loopback only. Refuse other Host names so that a
            # web page cannot reach this server through DNS rebinding.
            if not loopback_host(request.host):
                return json_response(403, {"error": "unauthenticated server: loopback hosts only"})
            return None
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), self.token
        ):
            logger.warning(
                "celery-pause admin: refused %s %s: bad or missing token",
                request.method,
                request.path,
            )
            return json_response(
                401,
                {"error": "authentication required: send Authorization: Bearer <token>"},
                (("WWW-Authenticate", 'Bearer realm="celery-pause"'),),
            )
        return None

    # -- endpoints ----------------------------------------------------------------------
    def get_status(self, request: Request) -> Response:
        return json_response(200, self.status_document())

    def get_metrics(self, request: Request) -> Response:
        """The queues' backlog, and what of it can run, for autoscalers."""
        view = overview(self.app, depths=self.queue_depths)
        try:
            body, content_type = render_backlog(view)
        except ConfigurationError as exc:
            return json_response(501, {"error": str(exc)})
        return Response(200, body, content_type)

    def post_pause(self, request: Request) -> Response:
        body = _body(request, PAUSE_FIELDS)
        result = pause(
            self.app,
            reason=_opt_text(body, "reason"),
            by=_opt_text(body, "by") or _caller(request),
            **_scope_names(body),
            **_times(body),
            beat=_opt_text(body, "beat"),
            force=_flag(body, "force"),
        )
        logger.info("celery-pause admin: %s", result.hold.describe())
        return json_response(
            200,
            {
                "paused": result.hold.scope.names(),
                "hold": result.hold.to_json(),
                "warnings": list(result.warnings),
                "generation": result.generation,
                "replaced": [h.to_json() for h in result.replaced],
            },
        )

    def post_throttle(self, request: Request) -> Response:
        body = _body(request, THROTTLE_FIELDS)
        result = throttle(
            self.app,
            rate=body.get("rate"),
            concurrency=body.get("concurrency"),
            per=_opt_text(body, "per"),
            cost=_opt_text(body, "cost"),
            adaptive=_flag(body, "adaptive"),
            fair=_opt_text(body, "fair"),
            weights=_weights(body),
            reason=_opt_text(body, "reason"),
            by=_opt_text(body, "by") or _caller(request),
            **_scope_names(body),
            **_times(body),
        )
        logger.info("celery-pause admin: %s", result.hold.describe())
        return json_response(
            200,
            {
                "hold": result.hold.to_json(),
                "warnings": list(result.warnings),
                "generation": result.generation,
                "replaced": [h.to_json() for h in result.replaced],
            },
        )

    def post_resume(self, request: Request) -> Response:
        body = _body(request, RESUME_FIELDS)
        result = resume(
            self.app,
            **_scope_names(body),
            hold=_opt_text(body, "hold"),
            force=_flag(body, "force"),
            by=_opt_text(body, "by") or _caller(request),
            ramp=duration(body["ramp"], "ramp") if body.get("ramp") not in (None, "") else None,
        )
        logger.info(
            "celery-pause admin: resume removed %d hold(s), cancelled %d, %d still in place",
            len(result.removed),
            len(result.cancelled),
            len(result.remaining),
        )
        return json_response(
            200,
            {
                "removed": [h.to_json() for h in result.removed],
                "remaining": [h.to_json() for h in result.remaining],
                "cancelled": [h.to_json() for h in result.cancelled],
                "scheduled": [h.to_json() for h in result.scheduled],
                "generation": result.generation,
                "flowing": not result.remaining,
                "ramps": [ramp_json(ramp, result.now) for ramp in result.ramps],
            },
        )

    # -- the status document ------------------------------------------------------------
    def status_document(self) -> dict[str, Any]:
        """``pause status --json`` (schema 2), with the recent history."""
        view = overview(
            self.app, depths=self.queue_depths, with_history=True, history_limit=HISTORY_SHOWN
        )
        return view.to_json()

    def queue_depths(self, names: list[str]) -> dict[str, int | None]:
        """Messages waiting per queue where the broker can tell, cached for a moment."""
        with self._depth_lock:
            read_at, depths = self._depths
            if time.monotonic() - read_at >= DEPTH_CACHE or set(depths) != set(names):
                depths = queue_depths(self.app, names)
                self._depths = (time.monotonic(), depths)
            return depths


def loopback_host(header: str) -> bool:
    """Whether a ``Host`` header names this machine literally (no DNS lookup)."""
    name = header.partition("]")[0][1:] if header.startswith("[") else header.partition(":")[0]
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


# -- request bodies -------------------------------------------------------------------------
def _is_json(request: Request) -> bool:
    return request.headers.get("content-type", "").split(";")[0].strip() == "application/json"


def _body(request: Request, allowed: tuple[str, ...]) -> dict[str, Any]:
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):
        raise InvalidInput("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise InvalidInput(f"unknown field(s) {', '.join(unknown)}; use {', '.join(allowed)}")
    return body


def _caller(request: Request) -> str:
    """Who to record when the body names nobody: the admin API and the client's address."""
    return f"admin-api@{request.remote or 'unknown'}"


def _opt_text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{key} must be a string")
    return value


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise InvalidInput(f"{key} must be true or false")
    return value


def _weights(body: dict[str, Any]) -> dict[str, float] | None:
    """The ``weights`` object of a fair throttle (checked as the Python API checks it)."""
    value = body.get("weights")
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        raise InvalidInput("weights must be an object of values (or patterns) to weights")
    return value


def _scope_names(body: dict[str, Any]) -> dict[str, Any]:
    """The names given for each dimension of a scope (``queues``, ``tasks``, …)."""
    return {name: _names(body, name) for name in NAMES}


def _times(body: dict[str, Any]) -> dict[str, Any]:
    """``resume_after``, ``resume_at`` and ``start_at`` of a pause or throttle (empty: none)."""
    given = {key: body.get(key) for key in ("resume_after", "resume_at", "start_at")}
    after, at, start = (None if value in (None, "") else value for value in given.values())
    return {
        "resume_after": None if after is None else duration(after),
        "resume_at": None if at is None else moment(at),
        "start_at": None if start is None else moment(start, "start_at"),
    }


def _names(body: dict[str, Any], key: str) -> list[str] | dict[str, Any] | None:
    """A list of names, or a comma-separated string as on the command line; labels also as
    an object (``{"tenant": "acme"}``, checked as the Python API checks it); empty means all."""
    value = body.get(key)
    if value in ("", {}):
        return None  # a form's empty field: all
    if key == "labels" and isinstance(value, dict):
        return value
    also = ", an object of label names to values" if key == "labels" else ""
    return name_list(value, key.removesuffix("s"), also=also)


# -- serving ----------------------------------------------------------------------------------
def read_token(path: Path) -> bytes:
    """The bearer token in ``path`` (surrounding whitespace ignored)."""
    try:
        token = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the token file {path}: {exc.strerror}") from None
    if len(token) < 16:
        raise ConfigurationError(
            f"the token in {path} is too short: use at least 16 characters, for example "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return token


def make_admin_app(app: Celery, *, token: bytes | None) -> Callable[..., Any]:
    """The admin API as a WSGI application (``token=None``: no authentication)."""
    return wsgi_app(AdminAPI(app, token=token))
