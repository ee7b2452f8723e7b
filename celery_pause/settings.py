"""Settings, read once per app from ``app.conf`` with explicit defaults."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from celery.app import utils as celery_app_utils

from .errors import ConfigurationError
from .model.state import BEAT_POLICIES
from .model.windows import Window, parse_windows

REDIS_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEME = "sentinel"
DEFAULTS: dict[str, Any] = {
    "pause_store_url": None,
    "pause_store_transport_options": None,
    "pause_key_prefix": None,
    "pause_poll_interval": 2.0,
    "pause_max_hold": 300.0,
    "pause_worker_ttl": 10.0,
    "pause_store_timeout": 2.0,
    "pause_http_port": None,
    "pause_http_host": "127.0.0.1",
    "pause_health_stall_after": 120.0,
    "pause_warn_after": 3600.0,
    "pause_warn_every": 900.0,
    "pause_history_size": 500,
    "pause_green_loop_wait": 0.25,
    "pause_beat_default": "queue",
    "pause_windows": None,
    "pause_ramp_peak": 100.0,
}


@dataclass(frozen=True)
class PauseConfig:
    """celery-pause's settings for one app."""

    store_url: str
    key_prefix: str
    poll_interval: float
    max_hold: float
    worker_ttl: float
    store_timeout: float
    http_port: int | None = None
    http_host: str = "127.0.0.1"
    health_stall_after: float = 120.0
    warn_after: float | None = 3600.0
    warn_every: float = 900.0
    history_size: int = 500
    store_options: dict[str, Any] = field(default_factory=dict)
    """Options of a ``sentinel://`` store: ``pause_store_transport_options``, or the
    broker's transport options when the broker doubles as the store."""
    green_loop_wait: float = 0.25
    beat_default: str = "queue"
    windows: tuple[Window, ...] = ()
    ramp_peak: float = 100.0
    """The cluster's start rate (tasks per second) at the end of a ramped resume."""

    @classmethod
    def from_app(cls, app: Celery) -> PauseConfig:
        conf = app.conf
        values = {key: conf.get(key, default) for key, default in DEFAULTS.items()}
        prefix = values["pause_key_prefix"]
        if prefix is None:
            prefix = f"celery-pause:{app.main or 'default'}"
        poll_interval = _positive(values, "pause_poll_interval")
        if values["pause_store_url"]:
            store_url = values["pause_store_url"]
            store_options = _options(
                "pause_store_transport_options", values["pause_store_transport_options"]
            )
        else:
            store_url = _store_from_broker(app)
            store_options = _options("broker_transport_options", app.conf.broker_transport_options)
        return cls(
            store_url=store_url,
            store_options=store_options,
            key_prefix=str(prefix),
            poll_interval=poll_interval,
            max_hold=_bounded_hold(app, _positive(values, "pause_max_hold")),
            worker_ttl=max(_positive(values, "pause_worker_ttl"), 3 * poll_interval),
            store_timeout=_positive(values, "pause_store_timeout"),
            http_port=_port(values["pause_http_port"]),
            http_host=str(values["pause_http_host"]),
            health_stall_after=_positive(values, "pause_health_stall_after"),
            warn_after=(
                None
                if values["pause_warn_after"] is None
                else _positive(values, "pause_warn_after")
            ),
            warn_every=_positive(values, "pause_warn_every"),
            history_size=_count(values, "pause_history_size"),
            green_loop_wait=min(_positive(values, "pause_green_loop_wait"), 2.0),
            beat_default=_beat(values["pause_beat_default"]),
            ramp_peak=_positive(values, "pause_ramp_peak"),
            windows=parse_windows(
                values["pause_windows"], app, _beat(values["pause_beat_default"])
            ),
        )


def censor_store_url() -> None:
    """Have Celery mask ``pause_store_url`` (it may hold a password) in ``inspect conf``
    and ``celery report``, as it masks settings whose names contain PASS, KEY, …"""
    hidden = celery_app_utils.HIDDEN_SETTINGS
    if "PAUSE_STORE_URL" not in hidden.pattern:
        celery_app_utils.HIDDEN_SETTINGS = re.compile(
            hidden.pattern + "|PAUSE_STORE_URL", hidden.flags
        )


def config_for(app: Celery) -> PauseConfig:
    """The app's settings, read on first use and cached on the app."""
    cached: PauseConfig | None = getattr(app, "_celery_pause_config", None)
    if cached is None:
        cached = PauseConfig.from_app(app)
        app._celery_pause_config = cached
    return cached


def _store_from_broker(app: Celery) -> str:
    broker = app.conf.broker_url or ""
    if isinstance(broker, (list, tuple)):
        broker = broker[0] if broker else ""
    scheme = str(broker).partition("://")[0]
    if scheme in (*REDIS_SCHEMES, SENTINEL_SCHEME):
        return str(broker)
    raise ConfigurationError(
        "celery-pause needs a store: set pause_store_url (redis://…, db+postgresql+psycopg://…, "
        "file:///dir, …); "
        f"only a Redis (or Sentinel) broker doubles as the store, and this broker is "
        f"{scheme or 'unset'!r}"
    )


def _options(key: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigurationError(f"{key} must be a dict, got {type(value).__name__}")
    return dict(value)


def _positive(values: dict[str, Any], key: str) -> float:
    try:
        value = float(values[key])
    except (TypeError, ValueError):
        raise ConfigurationError(f"{key} must be a number, got {values[key]!r}") from None
    if not value > 0:  # NaN too
        raise ConfigurationError(f"{key} must be positive, got {value!r}")
    return value


def _port(value: Any) -> int | None:
    """``None`` (off), or a TCP port; 0 picks a free one."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigurationError(f"pause_http_port must be a port number, got {value!r}")
    try:
        port = int(value)
    except ValueError:
        raise ConfigurationError(f"pause_http_port must be a port number, got {value!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigurationError(f"pause_http_port must be within 0-65535, got {port}")
    return port


def _count(values: dict[str, Any], key: str) -> int:
    value = values[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{key} must be a whole number of at least 1, got {value!r}")
    return value


def _beat(value: Any) -> str:
    if value not in BEAT_POLICIES:
        raise ConfigurationError(f"pause_beat_default must be 'queue' or 'skip', got {value!r}")
    return str(value)


def _bounded_hold(app: Celery, max_hold: float) -> float:
    """Keep held messages well inside Redis's visibility timeout."""
    options = app.conf.broker_transport_options or {}
    visibility = options.get("visibility_timeout")
    if visibility:
        return min(max_hold, float(visibility) / 4)
    return max_hold
