"""On the consumer loop: which tasks a breaker's half-open period lets through.

The agent (its own thread) asks for a trial; the admission picks one on the
consumer loop: a task of the breaker the gate already holds, or one fetched from
the breaker's paused queues with ``basic_get``. Exactly the admitted tasks pass
the gate although their queue is paused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from celery import Celery
from celery.worker.consumer import Consumer
from celery.worker.request import Request
from kombu.message import Message

from ..routing import queue_of
from .circuit import CircuitBreaker

logger = logging.getLogger(__name__)

TRIAL_SCAN = 10
"""Messages looked at per queue for a task of the breaker when fetching a trial."""


class HeldRequests(Protocol):
    """The worker's gate, as the admission uses it."""

    def held_requests(self) -> list[Request]:
        """The held requests, in arrival order."""

    def release(self) -> int:
        """Pass on every held request no longer paused (or now admitted)."""


class ConsumingWorker(Protocol):
    """The worker's state, as the admission uses it."""

    @property
    def consumed(self) -> tuple[str, ...]:
        """The queues the worker consumes."""


@dataclass
class Candidate:
    """A task picked on the consumer loop to be a trial: held in the gate, or fetched."""

    breaker: str
    period: int
    task_id: str
    message: Message | None = None


class TrialAdmission:
    """On the consumer loop: picks trial tasks and lets exactly those past the gate."""

    def __init__(self, c: Consumer, *, gate: HeldRequests, worker: ConsumingWorker) -> None:
        """Parameters:
        c: The worker's consumer (replaced after a reconnect).
        gate: The worker's gate.
        worker: The worker's state (which queues it consumes).
        """
        self.consumer = c
        self.gate = gate
        self.worker = worker
        self.admitted: set[str] = set()

    def consumed(self) -> tuple[str, ...]:
        """The queues the worker consumes."""
        return self.worker.consumed

    def admits(self, request: Request) -> bool:
        """The gate's hook: a trial passes although its queue is paused."""
        return request.id in self.admitted

    def pick(self, breaker: CircuitBreaker, period: int, deliver: Any) -> None:
        """Find one task of ``breaker`` to try (loop thread); hand it to ``deliver``."""
        try:
            candidate = self._held(breaker, period) or self._fetch(breaker, period)
        except Exception as exc:
            logger.error("celery-pause: circuit %s: cannot fetch a trial: %r", breaker.name, exc)
            candidate = None
        deliver(breaker.name, candidate)

    def admit(self, candidate: Candidate) -> None:
        """Let ``candidate`` through the gate (loop thread)."""
        self.admitted.add(candidate.task_id)
        if candidate.message is None:
            self.gate.release()
            return
        c = self.consumer
        handler = getattr(c.task_consumer, "on_message", None) or c.create_task_handler()
        handler(candidate.message)

    def give_back(self, candidate: Candidate) -> None:
        """Return a fetched candidate that did not become a trial (loop thread)."""
        if candidate.message is not None:
            self._requeue([candidate.message])

    def forget(self, task_ids: list[str]) -> None:
        """The period is over: its trials no longer pass (loop thread)."""
        self.admitted.difference_update(task_ids)

    def _held(self, breaker: CircuitBreaker, period: int) -> Candidate | None:
        app = self.consumer.app
        for request in self.gate.held_requests():
            if request.id in self.admitted or not _uses(request.task, breaker):
                continue
            if breaker.guards(queue_of(app, request)):
                return Candidate(breaker.name, period, request.id)
        return None

    def _fetch(self, breaker: CircuitBreaker, period: int) -> Candidate | None:
        c = self.consumer
        if c.task_consumer is None:
            return None
        app: Celery = c.app
        channel = c.task_consumer.channel
        accept = app.conf.accept_content
        for name in self.worker.consumed:
            if not breaker.guards(name) or name not in app.amqp.queues:
                continue
            bound = app.amqp.queues[name].bind(channel)
            others: list[Message] = []
            try:
                for _ in range(TRIAL_SCAN):
                    message = bound.get(no_ack=False, accept=accept)
                    if message is None:
                        break
                    headers = message.headers or {}
                    task = app.tasks.get(headers.get("task", ""))
                    if headers.get("id") and _uses(task, breaker):
                        return Candidate(breaker.name, period, str(headers["id"]), message)
                    others.append(message)
            finally:
                self._requeue(others)
        return None

    def _requeue(self, messages: list[Message]) -> None:
        for message in messages:
            try:
                message.reject(requeue=True)  # type: ignore[no-untyped-call]
            except Exception as exc:
                logger.warning("celery-pause: could not return a message to its queue: %r", exc)


def _uses(task: Any, breaker: CircuitBreaker) -> bool:
    used = getattr(task, "breaker", None)
    return isinstance(used, CircuitBreaker) and used.name == breaker.name
