"""Settings, read once per app from ``app.conf`` with explicit defaults."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from celery.app import utils as celery_app_utils

from .errors import ConfigurationError
from .model.limit import MAX_RATE
from .model.parking import CLAIM_LIFE, claim_life
from .model.state import BEAT_POLICIES
from .model.validation import (
    check_count,
    check_labels,
    check_options,
    check_port,
    check_positive,
)
from .model.windows import Window, parse_windows

DEFAULTS: dict[str, Any] = {
    "pause_store_url": None,
    "pause_store_transport_options": None,
    "pause_key_prefix": None,
    "pause_poll_interval": 2.0,
    "pause_max_hold": 300.0,
    "pause_max_held": None,
    "pause_park_at_send": False,
    "pause_worker_ttl": 10.0,
    "pause_lease": 10.0,
    "pause_forget_worker_after": 300.0,
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
    "pause_readyz_when_paused": "fail",
    "pause_labels": None,
    "pause_store_notify": True,
}
READYZ_WHEN_PAUSED = ("fail", "report")
"""``/readyz`` of a fully paused worker: 503 (``fail``), or 200 saying so (``report``)."""


@dataclass(frozen=True)
class PauseConfig:
    """celery-pause's settings for one app (each default is in :data:`DEFAULTS`)."""

    store_url: str
    key_prefix: str
    poll_interval: float
    max_hold: float
    worker_ttl: float
    store_timeout: float
    max_held: int | None = DEFAULTS["pause_max_held"]
    """Messages a worker holds at most before it parks the rest on the broker (``None``:
    :func:`~celery_pause.model.parking.max_held_for` its prefetch window)."""
    park_at_send: bool = DEFAULTS["pause_park_at_send"]
    """Whether a task sent while its scope is paused goes straight to its parking queue."""
    claim_life: float = CLAIM_LIFE
    """Seconds the claim of a moved task id is kept (:mod:`.model.parking`)."""
    lease: float | None = DEFAULTS["pause_lease"]
    """Seconds a worker applies what it read without reading again; then it holds every
    task until it reads the store (``None``: it keeps the last state read)."""
    forget_worker_after: float = DEFAULTS["pause_forget_worker_after"]
    """Seconds a worker that stopped reporting is still shown, and counted by waits."""
    http_port: int | None = DEFAULTS["pause_http_port"]
    http_host: str = DEFAULTS["pause_http_host"]
    health_stall_after: float = DEFAULTS["pause_health_stall_after"]
    warn_after: float | None = DEFAULTS["pause_warn_after"]
    warn_every: float = DEFAULTS["pause_warn_every"]
    history_size: int = DEFAULTS["pause_history_size"]
    store_options: dict[str, Any] = field(default_factory=dict)
    """Options of a ``sentinel://`` store: ``pause_store_transport_options``, or the
    broker's transport options when the broker doubles as the store."""
    store_from_broker: bool = False
    """Whether ``store_url`` is the broker's (no ``pause_store_url`` set)."""
    store_setting: str = "pause_store_url"
    """``pause_store_url`` as the app's configuration spells it, for messages."""
    green_loop_wait: float = DEFAULTS["pause_green_loop_wait"]
    beat_default: str = DEFAULTS["pause_beat_default"]
    windows: tuple[Window, ...] = ()
    ramp_peak: float = DEFAULTS["pause_ramp_peak"]
    """The cluster's start rate (tasks per second) at the end of a ramped resume."""
    readyz_when_paused: str = DEFAULTS["pause_readyz_when_paused"]
    labels: dict[str, str] = field(default_factory=dict)
    """Label name to the keyword argument of a task it is read from (a message header of the
    label's name works too)."""
    stretched: tuple[str, ...] = ()
    """What the worker says at start of a lease or worker TTL given under three poll
    intervals: each is stretched to three (two missed polls must not expire it)."""
    store_notify: bool = DEFAULTS["pause_store_notify"]
    """Whether changes are also pushed through the store's own notifications (Redis
    pub/sub), beside Celery's broadcast; stores without them poll only."""

    @classmethod
    def from_app(cls, app: Celery) -> PauseConfig:
        read = _Reader(app)
        prefix = read.values["pause_key_prefix"]
        if prefix is None:
            prefix = f"celery-pause:{app.main or 'default'}"
        poll_interval = read.positive("pause_poll_interval")
        given = read.values["pause_store_url"]
        options = "pause_store_transport_options" if given else "broker_transport_options"
        beat_default = read.beat("pause_beat_default")
        warn_after = read.values["pause_warn_after"]
        least = 3 * poll_interval
        given_ttl = read.positive("pause_worker_ttl")
        given_lease = None if read.values["pause_lease"] is None else read.positive("pause_lease")
        worker_ttl = max(given_ttl, least)
        lease = None if given_lease is None else max(given_lease, least)
        silent = worker_ttl + (lease or 0.0)
        three = f"three poll intervals ({read.name('pause_poll_interval')} {poll_interval:g} s)"
        stretched = tuple(
            f"{read.name(key)} {value:g} s is shorter than {three}: {least:g} s is in force"
            for key, value in (("pause_lease", given_lease), ("pause_worker_ttl", given_ttl))
            if value is not None and value < least
        )
        return cls(
            store_url=str(given or _broker_url(app)),
            store_from_broker=not given,
            store_setting=read.name("pause_store_url"),
            store_options=read.options(options),
            key_prefix=str(prefix),
            poll_interval=poll_interval,
            max_hold=_bounded_hold(app, read.positive("pause_max_hold")),
            max_held=read.count_or_none("pause_max_held"),
            claim_life=claim_life(_largest_visibility(app)),
            worker_ttl=worker_ttl,
            lease=lease,
            forget_worker_after=max(read.positive("pause_forget_worker_after"), silent),
            store_timeout=read.positive("pause_store_timeout"),
            http_port=read.port("pause_http_port"),
            http_host=str(read.values["pause_http_host"]),
            health_stall_after=read.positive("pause_health_stall_after"),
            warn_after=None if warn_after is None else read.positive("pause_warn_after"),
            warn_every=read.positive("pause_warn_every"),
            history_size=read.count("pause_history_size"),
            green_loop_wait=min(read.positive("pause_green_loop_wait"), 2.0),
            beat_default=beat_default,
            ramp_peak=read.rate("pause_ramp_peak"),
            readyz_when_paused=read.choice("pause_readyz_when_paused", READYZ_WHEN_PAUSED),
            labels=check_labels(
                read.name("pause_labels"), read.values["pause_labels"], error=ConfigurationError
            ),
            windows=parse_windows(
                read.values["pause_windows"], app, beat_default, read.name("pause_windows")
            ),
            stretched=stretched,
            store_notify=read.flag("pause_store_notify"),
            park_at_send=read.flag("pause_park_at_send"),
        )


def setting_name(app: Celery, key: str) -> str:
    """A setting as the app's configuration spells it: ``CELERY_PAUSE_STORE_URL`` under
    Django's ``config_from_object(..., namespace="CELERY")``, else ``pause_store_url``."""
    namespace = getattr(app, "namespace", None)
    return f"{namespace}_{key.upper()}" if namespace else key


class _Reader:
    """The app's settings, each checked by :mod:`.model.validation`; an error names the
    setting as the app spells it."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.values = {key: app.conf.get(key, default) for key, default in DEFAULTS.items()}

    def name(self, key: str) -> str:
        return setting_name(self.app, key)

    def positive(self, key: str) -> float:
        return check_positive(self.name(key), self.values[key], error=ConfigurationError)

    def rate(self, key: str) -> float:
        """Tasks per second, positive and at most :data:`~.model.limit.MAX_RATE`."""
        rate = check_positive(self.name(key), self.values[key], error=ConfigurationError)
        if not rate <= MAX_RATE:
            raise ConfigurationError(
                f"{self.name(key)} must be at most {MAX_RATE:g} tasks/s, got {rate!r}"
            )
        return rate

    def count(self, key: str) -> int:
        return check_count(self.name(key), self.values[key], error=ConfigurationError)

    def count_or_none(self, key: str) -> int | None:
        return None if self.values[key] is None else self.count(key)

    def port(self, key: str) -> int | None:
        return check_port(self.name(key), self.values[key], error=ConfigurationError)

    def options(self, key: str) -> dict[str, Any]:
        return check_options(self.name(key), self.app.conf.get(key), error=ConfigurationError)

    def flag(self, key: str) -> bool:
        value = self.values[key]
        if not isinstance(value, bool):
            raise ConfigurationError(f"{self.name(key)} must be True or False, got {value!r}")
        return value

    def beat(self, key: str) -> str:
        return self.choice(key, BEAT_POLICIES)

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        value = self.values[key]
        if value not in choices:
            named = " or ".join(repr(choice) for choice in choices)
            raise ConfigurationError(f"{self.name(key)} must be {named}, got {value!r}")
        return str(value)


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


def _broker_url(app: Celery) -> str:
    """The broker URL (the first of a failover list); empty when none is set."""
    broker = app.conf.broker_url or ""
    if isinstance(broker, (list, tuple)):
        broker = broker[0] if broker else ""
    return str(broker)


def _bounded_hold(app: Celery, max_hold: float) -> float:
    """Keep held messages well inside the visibility timeout of every queue the worker
    consumes (a quarter of the smallest: :func:`smallest_visibility`)."""
    options = app.conf.broker_transport_options or {}
    visibility = smallest_visibility(options, _consumed(app, options))
    if visibility:
        return min(max_hold, visibility / 4)
    return max_hold


def _largest_visibility(app: Celery) -> float | None:
    """The broker's ``visibility_timeout`` transport option, if it is a number."""
    visibility = (app.conf.broker_transport_options or {}).get("visibility_timeout")
    return float(visibility) if isinstance(visibility, int | float) else None


def smallest_visibility(options: Mapping[str, Any], consumed: Iterable[str]) -> float | None:
    """The smallest visibility timeout (seconds) of the queues ``consumed``: the broker's
    ``visibility_timeout`` transport option, or a queue's own in SQS ``predefined_queues``
    (``{"name": {"url": ..., "visibility_timeout": 30}}``); ``None`` if none is set."""
    found = [options.get("visibility_timeout")]
    predefined = options.get("predefined_queues") or {}
    if isinstance(predefined, Mapping):
        for name in consumed:
            queue = predefined.get(name)
            if isinstance(queue, Mapping):
                found.append(queue.get("visibility_timeout"))
    timeouts = [float(value) for value in found if value not in (None, "") and float(value) > 0]
    return min(timeouts) if timeouts else None


def _consumed(app: Celery, options: Mapping[str, Any]) -> list[str]:
    """The queues this process consumes (``-Q``, else all the app knows) among SQS's
    ``predefined_queues``; every predefined queue if none of them is named."""
    predefined = options.get("predefined_queues") or {}
    if not isinstance(predefined, Mapping) or not predefined:
        return []
    try:
        names = [queue.name for queue in app.amqp.queues.consume_from.values()]
    except Exception:  # an app whose queues cannot be built: bound by every queue
        names = []
    named = [name for name in names if name in predefined]
    return named or list(predefined)
