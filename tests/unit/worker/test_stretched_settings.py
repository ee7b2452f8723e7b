"""A lease or worker TTL under three poll intervals is stretched to three: the worker is told
which setting, the value given and the value in force (``PauseConfig.stretched``)."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from celery_pause.errors import ConfigurationError
from celery_pause.settings import config_for


def app_with(**settings: Any) -> Celery:
    app = Celery("stretched", set_as_current=False)
    app.conf.update(pause_store_url="memory://", **settings)
    return app


def test_a_lease_under_three_poll_intervals_is_said_with_both_values() -> None:
    # Given a lease of 1 s and a poll interval of 2 s
    app = app_with(pause_lease=1, pause_poll_interval=2)

    # Then 6 s is in force, and that is what the worker is told, naming the setting
    assert config_for(app).lease == 6.0
    assert list(config_for(app).stretched) == [
        "pause_lease 1 s is shorter than three poll intervals (pause_poll_interval 2 s): "
        "6 s is in force"
    ]


def test_defaults_stretched_by_a_long_poll_interval_are_said_as_defaults() -> None:
    app = app_with(pause_poll_interval=5, pause_worker_ttl=20)
    assert list(config_for(app).stretched) == [
        "pause_lease 10 s is shorter than three poll intervals "
        "(pause_poll_interval 5 s): 15 s is in force"
    ]


@pytest.mark.parametrize(
    "settings",
    [
        {},  # the defaults: lease and TTL 10 s, polls every 2 s
        {"pause_lease": 6, "pause_worker_ttl": 6, "pause_poll_interval": 2},  # exactly three
        {"pause_lease": None, "pause_poll_interval": 2},  # no lease at all
    ],
)
def test_nothing_is_said_of_settings_in_force_as_given(settings: dict[str, Any]) -> None:
    assert config_for(app_with(**settings)).stretched == ()


def test_a_refused_setting_is_refused_not_stretched() -> None:
    with pytest.raises(ConfigurationError):
        config_for(app_with(pause_lease="not a number"))


def test_a_django_style_namespace_names_the_settings_as_the_app_spells_them() -> None:
    app = app_with(pause_worker_ttl=3, pause_poll_interval=2)
    app.namespace = "CELERY"
    assert list(config_for(app).stretched) == [
        "CELERY_PAUSE_WORKER_TTL 3 s is shorter than three poll intervals "
        "(CELERY_PAUSE_POLL_INTERVAL 2 s): 6 s is in force"
    ]
