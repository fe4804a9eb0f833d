"""Processes and servers fail around running scorings: nothing is stuck, no event
is lost, nothing is judged twice. The worker kills come last (see docs/reliability.md)."""

import pytest

from tests.faults import scenarios

pytestmark = pytest.mark.processes


def assert_clean(figures):
    assert (figures.stuck, figures.events_lost, figures.duplicated) == (0, 0, 0), figures


def test_web_restart_clients_reconnect_and_catch_up(fault_stack):
    figures = scenarios.web_restart(fault_stack, count=4)

    assert figures.completed == 4, figures
    assert_clean(figures)
    assert "client reconnects: 0" not in figures.notes[-1]


def test_redis_outage_the_api_answers_and_events_are_caught_up(redis_fault_stack):
    figures = scenarios.redis_outage(redis_fault_stack, count=3)

    assert "reads [200]" in figures.notes[-1], figures
    # A scoring requested during the outage loses its wake-up task; polling workers run it anyway.
    assert figures.completed == figures.attempted, figures
    assert_clean(figures)


def test_many_scorings_against_a_rate_limiting_judge_all_end_once(fault_stack):
    figures = scenarios.load_with_rate_limits(fault_stack, count=30, workers=2, probe_count=5)

    assert figures.completed + figures.failed_total == 40, figures
    assert "requested while open and failed fast: 5/5" in figures.notes[-1], figures  # it opened
    assert "requested after the cool-down and completed: 5/5" in figures.notes[-1], figures  # and closed
    assert_clean(figures)


def test_sigterm_fails_in_flight_scorings_with_their_events(fault_stack):
    figures = scenarios.worker_sigterm(fault_stack)

    assert figures.failed_with("worker shut down") == 2, figures
    assert figures.events_stored == 4  # started and failed, for each
    assert_clean(figures)


def test_sigkill_orphans_fail_within_the_job_timeout_and_rescoring_works(fault_stack):
    figures = scenarios.worker_sigkill(fault_stack)

    assert figures.failed_with("orphaned: in progress") == 2, figures
    assert figures.completed == 2, figures
    assert_clean(figures)
