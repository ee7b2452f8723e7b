"""Remote-control command that tells workers to re-read the pause state now."""

from __future__ import annotations

from typing import Any, cast

from celery.worker.control import control_command, nok, ok

REFRESH = "pause_refresh"


@control_command()  # type: ignore[untyped-decorator]
def pause_refresh(state: Any) -> dict[str, str]:
    """Re-read the pause state from the store at once."""
    step = getattr(state.consumer, "celery_pause", None)
    if step is None:
        return cast(dict[str, str], nok("celery-pause is not installed on this worker"))
    step.sync.refresh()
    return cast(dict[str, str], ok("refreshing"))
