"""How the gate holds tasks on each execution pool, and the Celery internals it relies on.

- prefork (``worker_pool_putlocks`` on): a request waits for a free process in
  kombu's ``LaxBoundedSemaphore``; at a pause the gate takes the waiters.
- solo: the task runs on the consumer thread as it passes the gate.
- threads, gevent, eventlet: the pool takes requests into its own queue at once
  (the executor's queue, or a greenlet spawned for it), so the gate also checks
  each request *at the moment the pool starts it*: the pool's ``on_apply`` is
  wrapped so that, before ``accept_callback`` (which acknowledges the message
  with early acks), the gate decides. A request of a paused scope is neither run
  nor acknowledged; the gate holds it like any other.
- any other pool (``-P module:Class``): the gate holds what has not reached the
  pool yet, and nothing more. The worker runs and says so (log, status, probes).

:func:`support_for` checks at worker start that the internals a pool's way
relies on are there, and refuses to start with their names if not.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import celery
from celery.worker import state as worker_state
from celery.worker.consumer import Consumer
from celery.worker.request import Request

from ..errors import ConfigurationError
from ..logs import ThrottledLog
from .gate import Gate

logger = logging.getLogger(__name__)

PREFORK = "prefork"
SOLO = "solo"
IN_PROCESS = ("threads", "gevent", "eventlet")
"""Pools that start tasks in the worker process, through ``apply_target``."""
CELERY_POOLS = {
    "celery.concurrency.prefork": PREFORK,
    "celery.concurrency.solo": SOLO,
    "celery.concurrency.thread": "threads",
    "celery.concurrency.gevent": "gevent",
    "celery.concurrency.eventlet": "eventlet",
}
GREEN = ("gevent", "eventlet")
"""Pools whose consumer runs Celery's blocking ``synloop``, not the event loop."""
CHECKED_WITH = "5.7"
"""The Celery version whose internals these checks were written against."""


@dataclass(frozen=True)
class PoolSupport:
    """How the gate holds tasks on a worker's pool."""

    name: str
    """``prefork``, ``solo``, ``threads``, ``gevent``, ``eventlet``, or ``module:Class``."""
    start_check: bool = False
    """Whether the pool asks the gate again at the moment it starts a task."""
    problem: str = ""
    """Why the pause cannot be guaranteed on this pool; empty when it can."""
    greenlets: bool = False
    """Whether every thread of the worker is a greenlet of the pool's hub (gevent or eventlet
    with ``threading`` monkey-patched, as ``celery worker -P gevent|eventlet`` does)."""


def pool_name(pool: Any) -> str:
    """The pool's alias for Celery's own pools, ``module:Class`` for any other."""
    cls = type(pool)
    if cls.__name__ == "TaskPool" and cls.__module__ in CELERY_POOLS:
        return CELERY_POOLS[cls.__module__]
    return f"{cls.__module__}:{cls.__qualname__}"


def support_for(c: Consumer) -> PoolSupport:
    """How the gate can hold tasks on ``c``'s pool; raises if a known pool cannot be held."""
    pool = c.pool
    name = pool_name(pool)
    if name == PREFORK:
        _check_prefork(c)
        return PoolSupport(name)
    if name == SOLO:
        return PoolSupport(name)  # one task at a time on the consumer thread
    if name in IN_PROCESS:
        missing = missing_internals(pool, sys.modules[type(pool).__module__], Request)
        if missing:
            raise ConfigurationError(
                f"celery-pause cannot hold tasks on the {name} pool with Celery "
                f"{celery.__version__}: the Celery internals it relies on are missing or "
                f"changed: {'; '.join(missing)}. These checks were written for Celery "
                f"{CHECKED_WITH}; use the prefork pool until celery-pause supports this version."
            )
        return PoolSupport(name, start_check=True, greenlets=threads_are_green(name))
    return PoolSupport(
        name,
        problem=(
            f"the pause cannot be guaranteed on the third-party pool {name}: tasks "
            "already handed to it may still start after a pause is confirmed "
            "(prefork, solo, threads, gevent and eventlet are held exactly)"
        ),
    )


def threads_are_green(name: str) -> bool:
    """Whether the pool ``name``'s library patched ``threading``: then the worker's threads
    (the store thread among them) are greenlets, which switch only where they block."""
    if name == "gevent":
        from gevent import monkey

        return bool(monkey.is_module_patched("threading"))
    if name == "eventlet":
        from eventlet import patcher

        return bool(patcher.is_monkey_patched("thread"))
    return False


def _check_prefork(c: Consumer) -> None:
    controller = c.controller
    semaphore = getattr(controller, "semaphore", None)
    if (
        getattr(c.pool, "uses_semaphore", False)
        and getattr(controller, "pool_putlocks", False)
        and semaphore is not None
    ):
        if not hasattr(semaphore, "_waiting"):
            raise ConfigurationError(
                f"celery-pause cannot hold tasks on the prefork pool with Celery "
                f"{celery.__version__}: kombu's LaxBoundedSemaphore has no _waiting "
                f"queue any more (checked with Celery {CHECKED_WITH})"
            )
        return  # requests wait for a process where the gate can take them
    if getattr(c.pool, "putlocks", False):
        # No event loop (e.g. the filesystem transport): billiard blocks the consumer
        # thread until a process is free, so prefetched tasks still wait before the gate.
        return
    raise ConfigurationError(
        "celery-pause cannot hold tasks on the prefork pool with worker_pool_putlocks "
        "off: it hands prefetched tasks to the pool at once, where they can no longer be "
        "held. Turn worker_pool_putlocks on (the default)."
    )


def shorten_synloop_wait(c: Consumer, support: PoolSupport, wait: float) -> None:
    """On green pools, let the consumer loop run handed-over work within ``wait`` seconds.

    Their ``synloop`` runs ``call_soon`` callbacks (matching the consumers to a
    change, reporting it applied) only between two
    ``connection.drain_events(timeout=2.0)`` calls, so an idle worker would apply a
    change up to 2 s late; it waits for the broker in slices of ``wait``
    (``pause_green_loop_wait``) instead. Held tasks do not wait for it: the store
    greenlet hands them on (see ``ApplyStep.deliver``). ``c.connection`` is a new
    object after every reconnect.
    """
    connection = getattr(c, "connection", None)
    if support.name not in GREEN or c.hub is not None or connection is None:
        return
    drain = connection.drain_events
    if getattr(drain, "shortened", False):
        return

    def drain_events(*, timeout: float | None = None, **kwargs: Any) -> Any:
        if timeout is not None and timeout > wait:
            timeout = wait
        return drain(timeout=timeout, **kwargs)

    drain_events.shortened = True  # type: ignore[attr-defined]
    connection.drain_events = drain_events


# -- the in-process pools --------------------------------------------------------------------
def missing_internals(pool: Any, module: ModuleType, request_cls: type) -> list[str]:
    """What an in-process pool's start check needs and does not find, by name."""
    missing = []
    where = f"{type(pool).__module__}.{type(pool).__qualname__}"
    on_apply = getattr(pool, "on_apply", None)
    if not callable(on_apply):
        missing.append(f"{where}.on_apply is gone")
    else:
        parameters = inspect.signature(on_apply).parameters
        for name in ("callback", "accept_callback"):
            if name not in parameters:
                missing.append(f"{where}.on_apply takes no {name} argument")
    targets = {"apply_target": _apply_target(module, on_apply)}
    if not callable(targets["apply_target"]):
        missing.append(f"{module.__name__}.apply_target is gone")
    targets["apply_timeout"] = getattr(module, "apply_timeout", None)  # gevent's time limits
    for name, apply in targets.items():
        order = _call_order(apply) if callable(apply) else None
        if order is not None and order != ["accept", "target", "callback"]:
            missing.append(
                f"{module.__name__}.{name} no longer calls accept_callback, then the "
                f"task, then callback (it called: {', '.join(order) or 'nothing'})"
            )
    for name in ("on_accepted", "execute_using_pool"):
        if not callable(getattr(request_cls, name, None)):
            missing.append(f"{request_cls.__module__}.{request_cls.__qualname__}.{name} is gone")
    if not hasattr(worker_state, "reserved_requests"):
        missing.append("celery.worker.state.reserved_requests is gone")
    return missing


def _apply_target(module: ModuleType, on_apply: Any) -> Any:
    """The function ``on_apply`` runs a task through: the module's ``apply_target``, or
    (Celery 5.3's gevent pool) the default of its ``apply_target`` argument."""
    found = getattr(module, "apply_target", None)
    if found is None and callable(on_apply):
        parameter = inspect.signature(on_apply).parameters.get("apply_target")
        found = None if parameter is None else parameter.default
    return found if callable(found) else None


def _call_order(apply_target: Callable[..., Any]) -> list[str]:
    """The order in which ``apply_target`` calls what it is given, run on fakes."""
    calls: list[str] = []
    try:
        apply_target(
            lambda: calls.append("target"),
            (),
            {},
            lambda _result: calls.append("callback"),
            lambda _pid, _time: calls.append("accept"),
            getpid=lambda: 0,
        )
    except Exception as exc:
        calls.append(f"raised {exc!r}")
    return calls


def take_waiters(gate: Gate, semaphore: Any) -> int:
    """Move requests of paused scopes waiting for a pool slot into ``gate``.

    The semaphore is kombu's ``LaxBoundedSemaphore``: its waiters are
    ``(callback, args, kwargs)`` entries in a deque that must be edited in place.
    """
    waiting = getattr(semaphore, "_waiting", None)
    if not waiting:
        return 0
    keep = [entry for entry in list(waiting) if not (entry[1] and gate.take(entry[1][0]))]
    taken = len(waiting) - len(keep)
    if taken:
        waiting.clear()
        waiting.extend(keep)
    return taken


class SlotCheck:
    """On prefork: asks the gate once more when a request gets its pool slot.

    A request that passed the gate may wait for a slot (kombu's semaphore) while a
    pause closes the gate, or while the worker is frozen past its lease; the gate
    takes it when the slot comes instead of the pool, and the slot goes on to the
    next waiter, as Celery does for a revoked task (its issue 877).
    """

    def __init__(self, controller: Any, gate: Gate) -> None:
        self._start = controller._process_task
        self._release = controller._quick_release
        self._semaphore = controller.semaphore
        self._gate = gate
        controller._process_task = self

    def __call__(self, request: Request) -> Any:
        if not self._gate.take(request):
            return self._start(request)
        take_waiters(self._gate, self._semaphore)
        self._release()
        return None


class StartCheck:
    """Wraps an in-process pool's ``on_apply`` so the gate decides as each task starts."""

    def __init__(self, pool: Any, gate: Gate) -> None:
        self.gate = gate
        self._on_apply = pool.on_apply
        self._errors = ThrottledLog(logger)
        pool.on_apply = self.on_apply

    def on_apply(
        self,
        target: Callable[..., Any],
        args: Any = None,
        kwargs: Any = None,
        callback: Callable[[Any], Any] | None = None,
        accept_callback: Callable[[Any, float], Any] | None = None,
        **options: Any,
    ) -> Any:
        """On the consumer loop: hand the task to the pool, to be checked when it starts."""
        request = getattr(accept_callback, "__self__", None)
        if not isinstance(request, Request) or callback is None or accept_callback is None:
            self._errors.error(
                "celery-pause: a task reached the pool without its request (Celery "
                "internals changed?); it cannot be held once the pool starts it"
            )
            return self._on_apply(
                target, args, kwargs, callback=callback, accept_callback=accept_callback, **options
            )
        start = Start(self.gate, request, target, callback, accept_callback)
        return self._on_apply(
            start.run, args, kwargs, callback=start.finish, accept_callback=start.accept, **options
        )


class Start:
    """One task handed to an in-process pool; ``apply_target`` calls ``accept`` first."""

    __slots__ = ("_accept", "_callback", "_target", "gate", "request", "reserved", "skipped")

    def __init__(
        self,
        gate: Gate,
        request: Request,
        target: Callable[..., Any],
        callback: Callable[[Any], Any],
        accept: Callable[[Any, float], Any],
    ) -> None:
        self.gate = gate
        self.request = request
        self.reserved = request in worker_state.reserved_requests
        self._target = target
        self._callback = callback
        self._accept = accept
        self.skipped = False

    def accept(self, pid: Any, time_accepted: float) -> None:
        """In the pool, before the task body: start it, or leave it to the gate."""
        if self.gate.starts(self.request, was_reserved=self.reserved):
            self._accept(pid, time_accepted)
        else:
            self.skipped = True

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return None if self.skipped else self._target(*args, **kwargs)

    def finish(self, result: Any) -> None:
        if not self.skipped:
            self._callback(result)


class EndNotice:
    """Wraps the pool's ``apply_async`` so that a task's end is heard at once: the result
    callbacks (success or failure, on the consumer loop for prefork) of a task started while
    ``wanted()`` (a limit is in force) call ``on_end`` with the request after Celery's own,
    which drop it from the reserved ones. Without it, the store thread sees an end at its next
    look (every 10 ms while slots are in use)."""

    def __init__(
        self, pool: Any, on_end: Callable[[Request], None], wanted: Callable[[], bool]
    ) -> None:
        self._apply_async = pool.apply_async
        self._on_end = on_end
        self._wanted = wanted
        pool.apply_async = self.apply_async

    def apply_async(self, target: Any, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        if not self._wanted():
            return self._apply_async(target, args, kwargs, **options)
        for name in ("callback", "error_callback"):
            done = options.get(name)
            request = getattr(done, "__self__", None)  # Celery's: the request's own methods
            if done is not None and isinstance(request, Request):
                options[name] = functools.partial(self._ended, done, request)
        return self._apply_async(target, args, kwargs, **options)

    def _ended(self, done: Callable[..., Any], request: Request, *args: Any, **kw: Any) -> Any:
        try:
            return done(*args, **kw)
        finally:
            self._on_end(request)
