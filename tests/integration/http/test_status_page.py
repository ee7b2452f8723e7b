"""The status page in a real headless Chromium: load, see the state, pause, see it, resume."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from celery.schedules import crontab

import celery_pause
from celery_pause.model.adaptive import adapt_key, overload
from celery_pause.model.limit_keys import slots_key
from celery_pause.model.scope import Target
from celery_pause.stores import store_for
from celery_pause.stores.redis import RedisStore
from support.admin import TOKEN, admin_server
from support.harness import Cluster
from support.holds import ramps
from support.proj import RECORD_TASK, make_app

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 30_000


def chromium() -> str:
    """Debian's chromium; skipped without it on a laptop, a failure in CI."""
    path = shutil.which("chromium")
    problem = None if path else "chromium is not installed (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problem = "playwright is not installed (pip install playwright)"
    if problem is None and path is not None:
        return path
    if os.environ.get("CI"):
        pytest.fail(f"{problem} (CI must install it)")
    pytest.skip(str(problem))


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Any]:
    executable = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page()
        finally:
            browser.close()


def test_the_status_page_pauses_and_resumes_the_cluster(
    redis_cluster: Cluster, page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    # Given a running worker and the admin API with a token
    worker = redis_cluster.worker("w1")
    worker.wait_applied()
    with admin_server(redis_cluster.app) as url:
        # When the page is opened without the token, Then it asks for it
        page.goto(url + "/")
        expect(page.locator("#message")).to_contain_text("admin token", timeout=WAIT_MS)

        # When the token is given, Then it shows the cluster running, its worker and queue
        page.fill("#token", TOKEN)
        page.click("#token-button")
        expect(page.locator("#state")).to_have_text("RUNNING", timeout=WAIT_MS)
        expect(page.locator("#workers")).to_contain_text(worker.hostname, timeout=WAIT_MS)
        expect(page.locator("#queues")).to_contain_text(redis_cluster.queue(), timeout=WAIT_MS)

        # When the pause form is sent
        page.fill("#pause-reason", "browser maintenance")
        page.fill("#pause-by", "eve@ops")
        page.click("#pause-button")

        # Then the page shows the cluster paused, the hold and the history ...
        expect(page.locator("#state")).to_have_text("PAUSED", timeout=WAIT_MS)
        expect(page.locator("#holds")).to_contain_text("browser maintenance", timeout=WAIT_MS)
        expect(page.locator("#history")).to_contain_text("eve@ops", timeout=WAIT_MS)
        # ... and, once it refreshes itself, the worker that applied the pause
        paused = celery_pause.status(redis_cluster.app)
        assert paused.paused.everything
        worker.wait_applied(paused.state.generation)
        expect(page.locator("#workers")).to_contain_text("all queues", timeout=WAIT_MS)
        page.screenshot(path=str(tmp_path / "paused.png"), full_page=True)

        # When the resume form is sent
        page.fill("#resume-by", "eve@ops")
        page.click("#resume-button")

        # Then the page shows the cluster running again, and the resume in the history
        expect(page.locator("#state")).to_have_text("RUNNING", timeout=WAIT_MS)
        expect(page.locator("#message")).to_contain_text("flow again", timeout=WAIT_MS)
        expect(page.locator("#history tbody tr").first).to_contain_text("resume")
        assert not celery_pause.status(redis_cluster.app).paused

        # When one task type is paused through the form, Then the hold shows its tasks
        page.fill("#pause-tasks", "proj.billing.*")
        page.click("#pause-button")
        expect(page.locator("#state")).to_have_text("PARTIAL", timeout=WAIT_MS)
        expect(page.locator("#holds")).to_contain_text("tasks proj.billing.*", timeout=WAIT_MS)
        (hold,) = celery_pause.status(redis_cluster.app).holds
        assert hold.scope.rule.tasks == {"proj.billing.*"}


def test_the_status_page_schedules_and_cancels_a_pause_and_shows_windows(
    redis_cluster: Cluster, page: Any
) -> None:
    from playwright.sync_api import expect

    # Given an app with a maintenance window, and its status page
    # (at an hour twelve hours away: the window must not be in force while the test runs)
    hour = (datetime.now(timezone.utc).hour + 12) % 24
    window = {"name": "nightly", "schedule": crontab(hour=hour, minute=0), "duration": 3600}
    app = make_app(
        namespace=redis_cluster.namespace,
        broker=redis_cluster.broker,
        store=redis_cluster.store_url,
        pause_windows=[{**window, "queues": ["reports"], "beat": "skip"}],
    )
    with admin_server(app) as url:
        page.goto(url + "/")
        page.fill("#token", TOKEN)
        page.click("#token-button")

        # Then the window shows with its next occurrence
        expect(page.locator("#windows")).to_contain_text("nightly", timeout=WAIT_MS)
        expect(page.locator("#scheduled")).to_contain_text("window:nightly:", timeout=WAIT_MS)

        # When a pause is scheduled through the form, with beat skipping
        start = (datetime.now() + timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M")
        page.fill("#pause-queues", "emails")
        page.fill("#pause-start-at", start)
        page.select_option("#pause-beat", "skip")
        page.click("#pause-button")

        # Then it is listed as scheduled, not as a hold
        expect(page.locator("#message")).to_contain_text("Scheduled a pause", timeout=WAIT_MS)
        expect(page.locator("#scheduled")).to_contain_text("emails", timeout=WAIT_MS)
        (hold,) = [h for h in celery_pause.status(app).scheduled if h.manual]
        assert (hold.beat, hold.start_at) == ("skip", datetime.fromisoformat(start).timestamp())
        expect(page.locator("#state")).to_have_text("RUNNING")

        # When it is cancelled by its id through the resume form, Then it is gone
        page.fill("#resume-hold", hold.id)
        page.click("#resume-button")
        expect(page.locator("#message")).to_contain_text("Cancelled 1", timeout=WAIT_MS)
        expect(page.locator("#scheduled")).not_to_contain_text("emails", timeout=WAIT_MS)


def test_the_status_page_resumes_with_a_ramp_and_shows_it(
    redis_cluster: Cluster, page: Any
) -> None:
    from playwright.sync_api import expect

    # Given queue emails paused, and the status page
    celery_pause.pause(redis_cluster.app, queues=["emails"])
    with admin_server(redis_cluster.app) as url:
        page.goto(url + "/")
        page.fill("#token", TOKEN)
        page.click("#token-button")
        expect(page.locator("#state")).to_have_text("PARTIAL", timeout=WAIT_MS)

        # When it is resumed through the form over a ramp of ten minutes
        page.fill("#resume-queues", "emails")
        page.fill("#resume-ramp", "10m")
        page.click("#resume-button")

        # Then the page says so and lists the ramp, as the store recorded it
        expect(page.locator("#message")).to_contain_text("Ramping up until", timeout=WAIT_MS)
        expect(page.locator("#state")).to_have_text("RUNNING", timeout=WAIT_MS)
        row = page.locator("#ramps tbody tr")
        expect(row).to_contain_text("emails", timeout=WAIT_MS)
        expect(row).to_contain_text("manual")
        (ramp,) = ramps(redis_cluster.app)
        assert (ramp.duration, ramp.hold.scope.describe()) == (600.0, "queue emails")

        # And a bad ramp is refused with the reason, changing nothing
        celery_pause.pause(redis_cluster.app, queues=["emails"])
        page.fill("#resume-queues", "emails")
        page.fill("#resume-ramp", "2d")
        page.click("#resume-button")
        expect(page.locator("#message")).to_contain_text("at most a day", timeout=WAIT_MS)
        assert celery_pause.status(redis_cluster.app).paused.covers(Target(queue="emails"))


def test_the_status_page_throttles_and_shows_the_limit(redis_cluster: Cluster, page: Any) -> None:
    from playwright.sync_api import expect

    # Given the status page of a running cluster
    with admin_server(redis_cluster.app) as url:
        page.goto(url + "/")
        page.fill("#token", TOKEN)
        page.click("#token-button")
        expect(page.locator("#state")).to_have_text("RUNNING", timeout=WAIT_MS)

        # When queue imports is throttled through the form to 5/s and 2 at once
        page.fill("#throttle-queues", "imports")
        page.fill("#throttle-rate", "5/s")
        page.fill("#throttle-concurrency", "2")
        page.click("#throttle-button")

        # Then the page says so and lists the limit with its use, as the store recorded it
        expect(page.locator("#message")).to_contain_text("Limited imports to 5/s", timeout=WAIT_MS)
        row = page.locator("#holds tbody tr")
        expect(row).to_contain_text("5/s, 0 of 2 running", timeout=WAIT_MS)
        (hold,) = celery_pause.status(redis_cluster.app).limits
        assert hold.limit is not None and (hold.limit.rate, hold.limit.concurrency) == (5.0, 2)
        expect(page.locator("#state")).to_have_text("RUNNING")

        # And a bad rate is refused with the reason, changing nothing
        page.fill("#throttle-queues", "imports")
        page.fill("#throttle-rate", "ten")
        page.click("#throttle-button")
        expect(page.locator("#message")).to_contain_text("not a rate", timeout=WAIT_MS)
        assert celery_pause.status(redis_cluster.app).limits == (hold,)

        # And a limit of tokens beside it is listed with what it counts
        celery_pause.throttle(redis_cluster.app, queues=["imports"], rate="1000/s", cost="tokens")
        expect(page.locator("#holds")).to_contain_text("1000/s of tokens", timeout=WAIT_MS)

        # And an adaptive limit shows its rate now, its ceiling and its last cut
        adaptive = celery_pause.throttle(
            redis_cluster.app, queues=["api"], rate="200/s", adaptive=True
        ).hold
        store_for(redis_cluster.app).update_record(
            adapt_key(adaptive.id),
            lambda record, now: overload(record, now, why="429 from the API", retry_after=None),
        )
        expect(page.locator("#holds")).to_contain_text(
            re.compile(
                r"adaptive: now 1\d\d\.\d/s \(last cut [0-9T:-]+Z: 429 from the API\); up to 200/s"
            ),
            timeout=WAIT_MS,
        )

        # And a limit whose slots record someone damaged is listed, its use warned about
        store = store_for(redis_cluster.app)
        assert isinstance(store, RedisStore)
        store.client.set(store.record_key(slots_key(hold.id)), b"{damaged")
        expect(page.locator("#warnings")).to_contain_text(
            f"Store: WARNING limit {hold.id}: its use is not shown: record", timeout=WAIT_MS
        )
        expect(page.locator("#holds")).to_contain_text("5/s, at most 2 running")
        expect(page.locator("#state")).to_have_text("RUNNING")


def test_the_status_page_shows_a_paused_tenants_parked_tasks_per_tenant(
    redis_cluster: Cluster, page: Any
) -> None:
    from playwright.sync_api import expect

    # Given a producer that parks at send, and tenants A and C paused
    app = make_app(
        namespace=redis_cluster.namespace,
        broker=redis_cluster.broker,
        store=redis_cluster.store_url,
        pause_labels={"tenant": "tenant_id"},
        pause_park_at_send=True,
    )
    celery_pause.install(app)
    celery_pause.pause(app, labels=["tenant=A", "tenant=C"])

    # When 7 tasks of A and 3 of C are sent (to their parking queues, no worker needed)
    for tenant, count in (("A", 7), ("C", 3)):
        for i in range(count):
            app.send_task(RECORD_TASK, args=(f"{tenant}{i}", 0.0), kwargs={"tenant_id": tenant})

    # Then the page shows the pause with what is parked of each tenant
    with admin_server(app) as url:
        page.goto(url + "/")
        page.fill("#token", TOKEN)
        page.click("#token-button")
        expect(page.locator("#holds tbody tr")).to_contain_text(
            "pause; 10 parked on the broker (A 7, C 3)", timeout=WAIT_MS
        )
