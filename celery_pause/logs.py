"""A logger for errors that repeat (a store that stays down, messages that cannot be read):
once per interval, not per try."""

from __future__ import annotations

import logging
import time
from typing import Any

ERROR_LOG_EVERY = 30.0
"""Seconds between two log lines of a repeating error."""


class ThrottledLog:
    """Logs an error at most once every ``every`` seconds."""

    def __init__(self, logger: logging.Logger, *, every: float = ERROR_LOG_EVERY) -> None:
        self.logger = logger
        self.every = every
        self._logged_at = float("-inf")

    def error(self, message: str, *args: Any) -> None:
        self._log(logging.ERROR, message, *args)

    def warning(self, message: str, *args: Any) -> None:
        self._log(logging.WARNING, message, *args)

    def _log(self, level: int, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._logged_at >= self.every:
            self._logged_at = now
            self.logger.log(level, message, *args)
