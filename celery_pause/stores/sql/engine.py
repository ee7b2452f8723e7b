"""Opening a SQLAlchemy engine for a ``db+`` store URL, and the database's clock.

The URL is Celery's database result backend form: ``db+`` and a SQLAlchemy URL
(``db+postgresql+psycopg://…``, ``db+mysql+pymysql://…``, ``db+sqlite:///path``).
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa

from ...errors import StoreError
from ..base import bad_url, call_bound, display

SCHEME = "db+"
FAMILIES = ("postgresql", "mysql", "mariadb", "sqlite")
DRIVER_HINTS = {
    "postgresql": "pip install 'psycopg[binary]'  (with db+postgresql+psycopg://)",
    "mysql": "pip install pymysql  (with db+mysql+pymysql://)",
    "mariadb": "pip install pymysql  (with db+mariadb+pymysql://)",
}
WRITE = "celery_pause_write"
"""Execution option: this transaction writes (SQLite begins it IMMEDIATE)."""
# Deadlock / serialization failure / lock wait timeout: PostgreSQL SQLSTATEs, MySQL codes.
RETRY_SQLSTATES = {"40001", "40P01", "55P03"}
RETRY_MYSQL_CODES = {1205, 1213}
SQLITE_BUSY = "database is locked"
"""SQLite's answer when a lock cannot be had (its busy timeout is not used for every wait,
e.g. a deferred transaction creating the tables while another writes): run it again."""


class Retry(Exception):
    """The transaction lost a race (a duplicate first insert, a deadlock): run it again."""


@dataclass(eq=False)
class Call:
    """One transaction the :class:`Watchdog` guards: its socket, when it is due, and whether
    the watchdog cut it."""

    fileno: int
    due: float
    expired: bool = False


class Watchdog:
    """Cuts a connection whose transaction outlives its bound (:func:`.call_bound`).

    Kernel timeouts do not bound a read whose request was acknowledged and whose reply
    never comes (a peer that vanished, a middlebox that dropped the flow); psycopg has no
    read timeout. Past the bound, the connection's socket is shut down: the blocked call
    fails at once and the connection is discarded. One thread per store watches every
    call (started on first use, again in a forked child).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._cond = threading.Condition()
        self._calls: set[Call] = set()
        self._thread: threading.Thread | None = None

    @contextmanager
    def guard(self, dbapi_connection: Any) -> Iterator[Call | None]:
        """Watch the transaction run in the block on ``dbapi_connection`` (a connection
        without a socket, SQLite's, is not watched: ``None``)."""
        fileno = _fileno(dbapi_connection)
        if fileno is None:
            yield None
            return
        call = Call(fileno, time.monotonic() + self.seconds)
        with self._cond:
            self._calls.add(call)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._watch, name="celery-pause-sql-watchdog", daemon=True
                )
                self._thread.start()
            elif len(self._calls) == 1:
                self._cond.notify()  # it waits for a first call
        try:
            yield call
        finally:
            with self._cond:
                self._calls.discard(call)  # back to the pool: never cut from here on

    def _watch(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for call in [c for c in self._calls if c.due <= now]:
                    self._calls.discard(call)
                    call.expired = True
                    _shut(call.fileno)
                due = min((c.due for c in self._calls), default=None)
                self._cond.wait(None if due is None else due - now)


def _shut(fileno: int) -> None:
    """Shut the socket ``fileno`` down both ways: a call blocked on it fails at once."""
    try:
        with socket.socket(fileno=os.dup(fileno)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # closed meanwhile: the call has failed already


def _fileno(dbapi_connection: Any) -> int | None:
    """The socket of a driver connection (psycopg ``fileno()``, PyMySQL ``_sock``)."""
    fileno = getattr(dbapi_connection, "fileno", None)
    if callable(fileno):
        return int(fileno())
    sock = getattr(dbapi_connection, "_sock", None)
    return sock.fileno() if isinstance(sock, socket.socket) else None


def open_engine(url: str, *, timeout: float) -> sa.Engine:
    """An engine for the ``db+`` store ``url``; :class:`ConfigurationError` if the URL,
    the database kind or its driver is not usable. Connects lazily."""
    try:
        parsed = sa.engine.make_url(url[len(SCHEME) :])
        port = parsed.port
    except (sa.exc.ArgumentError, ValueError):
        raise bad_url(url, "is not a SQLAlchemy URL") from None
    if port is not None and not 0 < port < 65536:
        raise bad_url(url, f"has port {port}, outside 1-65535")
    family = parsed.get_backend_name()
    if family not in FAMILIES:
        raise bad_url(
            url, f": the SQL store supports PostgreSQL, MySQL/MariaDB and SQLite, not {family!r}"
        )
    if family == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise bad_url(
            url,
            "needs a file (db+sqlite:///path/to/file.db); "
            "for a store inside one process use memory://",
        )
    try:
        engine = sa.create_engine(parsed, **_options(family, timeout))
    except sa.exc.NoSuchModuleError:
        raise bad_url(url, f": SQLAlchemy has no driver {parsed.drivername!r}") from None
    except ImportError as exc:
        hint = DRIVER_HINTS.get(family, "install the database driver")
        driver = exc.name or parsed.drivername
        raise bad_url(url, f"needs the driver {driver!r}: {hint}") from None
    except sa.exc.ArgumentError as exc:
        raise bad_url(url, f": {exc}"[:300]) from None
    if family == "sqlite":
        _immediate_writes(engine)
    elif family in ("mysql", "mariadb"):
        _utc_sessions(engine)
    return engine


def _options(family: str, timeout: float) -> dict[str, Any]:
    seconds = max(1, math.ceil(timeout))
    if family == "sqlite":
        # A lock is waited for (busy timeout) rather than failing at once.
        return {"connect_args": {"timeout": max(timeout, 10.0), "check_same_thread": False}}
    bound = int(call_bound(timeout))
    connect_args: dict[str, Any] = {"connect_timeout": seconds}
    if family == "postgresql":
        # The kernel gives up a dead peer: unacknowledged sends after the bound, an idle
        # connection (a reply that never comes) after keepalives go unanswered. A reply
        # lost behind a live peer is cut by :class:`Watchdog`.
        connect_args |= {
            "keepalives": 1,
            "keepalives_idle": seconds,
            "keepalives_interval": seconds,
            "keepalives_count": 2,
            "tcp_user_timeout": bound * 1000,
        }
    else:
        # A read may wait for a row lock: allow more than a connect.
        connect_args |= {"read_timeout": bound, "write_timeout": bound}
    return {
        "connect_args": connect_args,
        # No ping per checkout (a round trip on every store call): a connection the
        # database dropped fails its transaction, is invalidated, and the call runs again.
        # READ COMMITTED: a locking read sees the latest commit, and MySQL takes no gap
        # locks (two first writers of a row then conflict on the key, not deadlock).
        "isolation_level": "READ COMMITTED",
    }


def _immediate_writes(engine: sa.Engine) -> None:
    """SQLite: let SQLAlchemy begin every transaction, ``BEGIN IMMEDIATE`` for writes,
    so a read-modify-write holds the database's write lock from its first read."""

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver must not BEGIN by itself
        dbapi_connection.execute("PRAGMA journal_mode=WAL")

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get(WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _utc_sessions(engine: sa.Engine) -> None:
    """MySQL/MariaDB: sessions in UTC, so ``UNIX_TIMESTAMP(NOW(6))`` is exact across DST."""

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00'")


def clock(conn: sa.Connection) -> float:
    """The database server's time (seconds since the epoch, sub-second); SQLite's is
    this host's clock, the database being a file here."""
    family = conn.dialect.name
    if family == "postgresql":
        query = "SELECT extract(epoch FROM clock_timestamp())"
    elif family in ("mysql", "mariadb"):
        query = "SELECT UNIX_TIMESTAMP(NOW(6))"
    else:
        return time.time()
    return float(conn.exec_driver_sql(query).scalar_one())


@contextmanager
def failing(url: str) -> Iterator[None]:
    """SQLAlchemy's errors as :class:`StoreError` with the password masked, and a
    lost race as :class:`Retry`."""
    try:
        yield
    except sa.exc.IntegrityError:
        raise Retry() from None
    except sa.exc.DBAPIError as exc:
        if _retryable(exc):
            raise Retry() from None
        raise StoreError(f"pause store {display(url)} failed: {_detail(url, exc)}") from None
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError(f"pause store {display(url)} failed: {_detail(url, exc)}") from None


def _retryable(exc: sa.exc.DBAPIError) -> bool:
    if exc.connection_invalidated:
        return True  # a pooled connection the database had dropped: a new one is taken
    orig = exc.orig
    if getattr(orig, "sqlstate", None) in RETRY_SQLSTATES:
        return True
    args: tuple[Any, ...] = getattr(orig, "args", ())
    return bool(args) and (args[0] in RETRY_MYSQL_CODES or args[0] == SQLITE_BUSY)


def _detail(url: str, exc: sa.exc.SQLAlchemyError) -> str:
    """The driver's message on one line, without the URL's password."""
    text = " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    return text.replace(password, "**") if password else text
