"""The store schemes: one alias table, as kombu's ``TRANSPORT_ALIASES``.

A leaf module (it imports nothing of the package), so the settings can ask which
broker URLs double as the store without loading a store.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Alias:
    """One scheme of ``pause_store_url``: the store class that serves it."""

    target: str
    """``module:Class`` of the store, imported only when a URL of the scheme is opened."""
    shown: str
    """How the scheme reads in messages (``redis://``)."""
    broker: bool = False
    """Whether a Celery broker URL of this scheme doubles as the store."""
    requires: str = ""
    """A module the store needs, and what to install when it is missing (``install``)."""
    install: str = ""


REDIS = "celery_pause.stores.redis:RedisStore"
CLUSTER = "celery_pause.stores.redis_cluster:RedisClusterStore"
STORE_ALIASES: dict[str, Alias] = {
    "redis": Alias(REDIS, "redis://", broker=True),
    "rediss": Alias(REDIS, "rediss://", broker=True),
    "unix": Alias(REDIS, "unix://", broker=True),
    "sentinel": Alias("celery_pause.stores.sentinel:SentinelStore", "sentinel://", broker=True),
    "redis+cluster": Alias(CLUSTER, "redis+cluster://"),
    "rediss+cluster": Alias(CLUSTER, "rediss+cluster://"),
    "db+": Alias(
        "celery_pause.stores.sql.store:SqlStore",
        "db+<SQLAlchemy URL>",
        requires="sqlalchemy",
        install="SQLAlchemy: pip install 'celery-pause[sql]'",
    ),
    "file": Alias("celery_pause.stores.file:FileStore", "file:///dir"),
    "memory": Alias("celery_pause.stores.memory:MemoryStore", "memory://"),
}
"""Scheme of ``pause_store_url`` → its store; a key ending in ``+`` takes every scheme it
begins (``db+postgresql+psycopg``), as Celery's ``db+`` result backends."""

BROKER_SCHEMES = tuple(scheme for scheme, alias in STORE_ALIASES.items() if alias.broker)
"""Schemes of a broker URL that is also a store URL (Redis and Sentinel)."""

_shown = [alias.shown for alias in STORE_ALIASES.values()]
SCHEMES = f"{', '.join(_shown[:-1])} or {_shown[-1]}"
"""Every scheme, as the message for an unknown one lists them."""


def alias_for(url: str) -> Alias | None:
    """The alias serving ``url``'s scheme, or ``None`` for an unknown scheme."""
    scheme = url.partition("://")[0]
    if scheme in STORE_ALIASES:
        return STORE_ALIASES[scheme]
    prefixed = (
        a for key, a in STORE_ALIASES.items() if key.endswith("+") and scheme.startswith(key)
    )
    return next(prefixed, None)
