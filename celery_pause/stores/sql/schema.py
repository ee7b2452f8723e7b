"""The SQL store's tables, their schema version, and creating them.

Three tables, shared by every app that uses the database (each row carries the
store's key prefix):

- ``celery_pause_values``: one JSON text per ``(prefix, kind, name)``: the state, worker
  reports and records (the logs, event windows and leases among them); ``expires`` is no
  longer written (it timed the leases of earlier releases);
- ``celery_pause_log``: the logs as earlier releases kept them, one entry a row, read
  until a log's first entry in a record takes them over;
- ``celery_pause_schema``: one row, the version of this layout. It is written
  last, so a database with a version row has every table.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from ...errors import SchemaError
from .engine import WRITE

SCHEMA_VERSION = 1
"""The layout this release reads and writes; a later release migrates from it."""

PREFIX_LENGTH = 190
NAME_LENGTH = 255


def _string(length: int) -> sa.types.TypeEngine[str]:
    """A VARCHAR compared byte for byte (MySQL/MariaDB default to case-insensitive)."""
    exact = mysql.VARCHAR(length, charset="utf8mb4", collation="utf8mb4_bin")
    return sa.String(length).with_variant(exact, "mysql", "mariadb")


JSON_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(charset="utf8mb4"), "mysql", "mariadb")

metadata = sa.MetaData()

values = sa.Table(
    "celery_pause_values",
    metadata,
    sa.Column("prefix", _string(PREFIX_LENGTH), primary_key=True),
    sa.Column("kind", _string(16), primary_key=True),
    sa.Column("name", _string(NAME_LENGTH), primary_key=True),
    sa.Column("value", JSON_TEXT, nullable=False),
    sa.Column("expires", sa.Double(), nullable=True),
)

log = sa.Table(
    "celery_pause_log",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    sa.Column("prefix", _string(PREFIX_LENGTH), nullable=False),
    sa.Column("name", _string(64), nullable=False),
    sa.Column("entry", JSON_TEXT, nullable=False),
    sa.Index("celery_pause_log_by_name", "prefix", "name", "id"),
)

schema = sa.Table(
    "celery_pause_schema",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("version", sa.Integer(), nullable=False),
)

TABLES = (values.name, log.name, schema.name)


def read_version(engine: sa.Engine) -> int | None:
    """The schema version in the database, or ``None`` before the tables exist."""
    if not sa.inspect(engine).has_table(schema.name):
        return None
    with engine.connect() as conn:
        version = conn.execute(sa.select(schema.c.version).where(schema.c.id == 1)).scalar()
    return None if version is None else int(version)


def prepare(engine: sa.Engine) -> tuple[int, bool]:
    """Create the tables unless they exist; return the schema version and whether it
    created them. :class:`SchemaError` for a version this release does not know.

    Safe to run from many processes at once: a process that loses the race to
    create a table finds it made by the winner.
    """
    version = read_version(engine)
    created = False
    if version is None:
        for tables in ([values, log], [schema]):
            try:
                with _writing(engine) as conn:
                    metadata.create_all(conn, tables=tables, checkfirst=True)
            except sa.exc.DBAPIError:
                if not _tables_exist(engine, tuple(table.name for table in tables)):
                    raise
        try:
            with _writing(engine) as conn:
                conn.execute(sa.insert(schema).values(id=1, version=SCHEMA_VERSION))
            created = True
        except sa.exc.IntegrityError:
            pass  # another process wrote it first
        version = read_version(engine)
    check_version(version)
    assert version is not None
    return version, created


def check_version(version: int | None) -> None:
    """Refuse a layout this release cannot read."""
    if version is None:
        raise SchemaError("the pause store's tables are incomplete: no schema version row")
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"the pause store's tables have schema version {version}, newer than this "
            f"celery-pause understands ({SCHEMA_VERSION}): upgrade celery-pause here"
        )
    if version < 1:
        raise SchemaError(f"the pause store's tables have an unknown schema version {version}")


@contextmanager
def _writing(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A write transaction (SQLite: ``BEGIN IMMEDIATE``, waiting for the lock)."""
    with engine.connect() as conn:
        conn.execution_options(**{WRITE: True})
        with conn.begin():
            yield conn


def _tables_exist(engine: sa.Engine, names: tuple[str, ...]) -> bool:
    inspector = sa.inspect(engine)
    return all(inspector.has_table(name) for name in names)
