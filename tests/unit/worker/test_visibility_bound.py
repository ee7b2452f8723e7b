"""``pause_max_hold`` is bounded by the smallest visibility timeout of the consumed queues."""

from __future__ import annotations

from celery import Celery

from celery_pause.settings import PauseConfig, smallest_visibility

SQS_QUEUES = {
    "fast": {"url": "http://sqs/1/fast", "visibility_timeout": 40},
    "slow": {"url": "http://sqs/1/slow", "visibility_timeout": 3600},
    "plain": {"url": "http://sqs/1/plain"},
}


def test_the_smallest_timeout_of_the_consumed_queues_wins() -> None:
    # Given SQS predefined queues with their own visibility timeouts, and a broker-wide one
    options = {"visibility_timeout": 1800, "predefined_queues": SQS_QUEUES}

    # When the consumed queues are compared
    # Then the smallest of the consumed queues and the broker's wins; others do not count
    assert smallest_visibility(options, ["slow", "fast"]) == 40
    assert smallest_visibility(options, ["slow"]) == 1800
    assert smallest_visibility(options, ["plain"]) == 1800
    assert smallest_visibility({"predefined_queues": SQS_QUEUES}, ["slow"]) == 3600


def test_no_timeout_set_means_no_bound() -> None:
    # Given no visibility timeout anywhere (RabbitMQ), or an empty one
    # When compared / Then there is no bound
    assert smallest_visibility({}, ["a"]) is None
    assert smallest_visibility({"visibility_timeout": ""}, ["a"]) is None
    assert smallest_visibility({"predefined_queues": {"a": {"url": "u"}}}, ["a"]) is None


def app_with(options: dict[str, object], queues: list[str] | None = None) -> Celery:
    app = Celery("bound", set_as_current=False, broker="sqs://")
    app.conf.broker_transport_options = options
    app.conf.pause_store_url = "memory://"
    if queues:
        app.amqp.queues.select(queues)
    return app


def test_max_hold_is_a_quarter_of_the_smallest_consumed_queue_timeout() -> None:
    # Given an SQS app whose worker consumes "fast" (40 s) and "slow" (3600 s)
    app = app_with({"predefined_queues": SQS_QUEUES}, ["fast", "slow"])

    # When its settings are read
    config = PauseConfig.from_app(app)

    # Then held messages go back after a quarter of 40 s
    assert config.max_hold == 10.0


def test_a_worker_of_slow_queues_only_keeps_the_default_hold() -> None:
    # Given a worker consuming "slow" only (3600 s: a quarter is over the 300 s default)
    config = PauseConfig.from_app(app_with({"predefined_queues": SQS_QUEUES}, ["slow"]))

    # Then the default stands
    assert config.max_hold == 300.0


def test_without_named_queues_every_predefined_queue_counts() -> None:
    # Given a process that consumes no predefined queue by name (a client)
    config = PauseConfig.from_app(app_with({"predefined_queues": SQS_QUEUES}))

    # Then the bound is that of the smallest predefined queue
    assert config.max_hold == 10.0


def test_redis_visibility_timeout_still_bounds() -> None:
    # Given the broker-wide Redis visibility timeout
    config = PauseConfig.from_app(app_with({"visibility_timeout": 120}))

    # Then a quarter of it
    assert config.max_hold == 30.0
