"""ProfileRange: which steps fall in a step range or a time range, and when it is over."""

from __future__ import annotations

import pytest

from stepscope.config import ProfileRange
from stepscope.errors import ConfigError

T0 = 1_700_000_000.0


def test_step_range_is_half_open() -> None:
    profile_range = ProfileRange(start_step=5, num_steps=3)
    profiled = [step for step in range(12) if profile_range.should_profile(step, now_s=T0)]
    assert profiled == [5, 6, 7]
    assert not profile_range.is_past(7, now_s=T0)
    assert profile_range.is_past(8, now_s=T0)


def test_time_range_with_duration_profiles_every_step_inside_it() -> None:
    profile_range = ProfileRange(start_unix_time=T0 + 10, duration=5)
    seen = {step: T0 + 2 * step for step in range(12)}  # one step every 2 s
    profiled = [step for step, now_s in seen.items() if profile_range.should_profile(step, now_s)]
    assert profiled == [5, 6, 7]  # at T0+10, T0+12, T0+14; T0+15 is the end (excluded)
    assert not profile_range.is_past(7, T0 + 14)
    assert profile_range.is_past(8, T0 + 15)


def test_time_range_without_duration_profiles_exactly_one_step() -> None:
    profile_range = ProfileRange(start_unix_time=T0 + 3)
    profiled = [step for step in range(8) if profile_range.should_profile(step, T0 + step)]
    assert profiled == [3]
    assert profile_range.should_profile(3, T0 + 3.5), "the chosen step stays chosen"
    assert not profile_range.is_past(3, T0 + 3.5)
    assert profile_range.is_past(4, T0 + 4)


def test_time_range_without_start_begins_at_the_first_check() -> None:
    profile_range = ProfileRange(duration=10)
    assert profile_range.should_profile(40, T0)
    assert profile_range.should_profile(41, T0 + 9.9)
    assert not profile_range.should_profile(42, T0 + 10)
    assert profile_range.is_past(42, T0 + 10)


def test_nothing_is_past_before_a_time_range_without_duration_starts() -> None:
    profile_range = ProfileRange(start_unix_time=T0 + 100)
    assert not profile_range.is_past(50, T0)
    assert not profile_range.should_profile(50, T0)


def test_equality_and_repr_use_the_configured_fields() -> None:
    assert ProfileRange(start_step=1, num_steps=2) == ProfileRange(start_step=1, num_steps=2)
    assert ProfileRange(start_step=1, num_steps=2) != ProfileRange(start_step=1, num_steps=3)
    assert repr(ProfileRange(start_step=1, num_steps=2)) == (
        "ProfileRange(start_step=1, num_steps=2)"
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"start_step": 3},
        {"start_step": 3, "num_steps": 1, "duration": 2},
        {"start_step": -1, "num_steps": 1},
    ],
)
def test_incomplete_or_mixed_ranges_are_refused(kwargs) -> None:
    with pytest.raises(ConfigError, match="ProfileRange"):
        ProfileRange(**kwargs)


def test_next_edge_is_where_the_answer_may_change() -> None:
    steps = ProfileRange(start_step=5, num_steps=3)
    assert [steps.next_edge(step) for step in (0, 4, 5, 7, 8, 100)] == [5, 5, 8, 8, None, None]
    # between the edges the answer stays the same
    assert {steps.should_profile(step, 0.0) for step in range(5, 8)} == {True}
    timed = ProfileRange(start_unix_time=1000.0, duration=5.0)
    assert timed.next_edge(12) == 12  # the clock can move it at any boundary
