"""bench.adaptive's figures from the calls a downstream answered: what each one counts."""

from __future__ import annotations

from bench.adaptive_figures import CAPACITIES, analyse, inside_retry_after, per_second
from support.downstream import Call


def test_a_call_inside_a_retry_after_counts_once_past_the_grace() -> None:
    calls = [
        Call(10.0, False, "a"),  # a 429 asking for 1 s
        Call(10.05, True, "b"),  # within the grace: started before the pause arrived
        Call(10.5, True, "c"),  # inside the Retry-After: late
        Call(11.2, True, "d"),  # after it
    ]
    found = inside_retry_after(calls)
    assert found == {"429": 1, "later_than_grace": 1, "latest_within_grace_s": 0.05}


def test_goodput_and_the_429_share_count_from_the_settling_time_of_each_phase() -> None:
    # 40 s phases: in the first, 30 answered calls a second from 15 s on, and one refused
    calls = [[15 + i / 30, 1] for i in range(30 * 25)] + [[20.0, 0]]
    raw = {"settings": {"phase_s": 40.0}, "runs": {"x": {"calls": calls, "gave_up": 0}}}
    first = analyse(raw)["x"]["phases"][0]
    assert first["goodput"] == 30.0 and first["of_capacity"] == round(30 / CAPACITIES[0], 3)
    assert first["share_429"] == round(1 / (30 * 25 + 1), 3)
    assert per_second([[0.2, 1], [0.7, 0], [1.1, 1]]) == [[1, 1], [1, 0]]
