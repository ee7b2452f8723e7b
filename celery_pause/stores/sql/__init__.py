"""The SQL store: the state in one row, read and written through SQLAlchemy."""

from __future__ import annotations

from .store import SqlStore

__all__ = ("SqlStore",)
