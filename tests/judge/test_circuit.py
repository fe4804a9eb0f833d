"""The judge circuit breaker, whose state every worker process shares through the database."""

import threading
import time
from datetime import datetime

import pytest
from django.db import connection

from scoring.judge import circuit
from scoring.judge.errors import CircuitOpen, JudgeLLMError
from scoring.models import JudgeCircuit

MODEL = "openai/judge"


def fail(times: int, model: str = MODEL) -> None:
    for number in range(1, times + 1):
        circuit.record_failure(model, f"judge LLM provider error (503) after 4 attempts: boom {number}")


@pytest.mark.django_db
class TestBreaker:
    def test_unknown_model_is_closed(self):
        circuit.check(MODEL)

        assert circuit.state(MODEL) == {
            "model": MODEL,
            "state": "closed",
            "consecutive_failures": 0,
            "failure_threshold": 5,
            "open_until": None,
            "last_error": None,
        }

    def test_stays_closed_below_the_threshold(self):
        fail(4)

        circuit.check(MODEL)
        assert circuit.state(MODEL)["state"] == "closed"
        assert circuit.state(MODEL)["consecutive_failures"] == 4

    def test_opens_at_the_threshold(self, settings):
        settings.SCORING_CIRCUIT_COOLDOWN_S = 600
        fail(5)

        with pytest.raises(CircuitOpen) as raised:
            circuit.check(MODEL)

        state = circuit.state(MODEL)
        assert state["state"] == "open"
        assert str(raised.value) == (
            "judge LLM circuit breaker is open after 5 consecutive failed calls "
            "(last: judge LLM provider error (503) after 4 attempts: boom 5); "
            f"new scorings fail fast until {state['open_until']}"
        )
        open_until = datetime.fromisoformat(state["open_until"]).timestamp()
        assert 590 < open_until - time.time() <= 600
        assert isinstance(raised.value, JudgeLLMError)

    def test_threshold_and_models_are_separate(self, settings):
        settings.SCORING_CIRCUIT_FAILURE_THRESHOLD = 2
        fail(2)

        with pytest.raises(CircuitOpen):
            circuit.check(MODEL)
        circuit.check("openai/other-judge")

    def test_success_closes_it(self):
        fail(5)

        circuit.record_success(MODEL)

        circuit.check(MODEL)
        assert circuit.state(MODEL) | {"model": None} == {
            "model": None,
            "state": "closed",
            "consecutive_failures": 0,
            "failure_threshold": 5,
            "open_until": None,
            "last_error": None,
        }

    def test_half_open_after_the_cool_down_and_a_failure_reopens_it(self, settings):
        settings.SCORING_CIRCUIT_COOLDOWN_S = 0.2
        fail(5)
        time.sleep(0.25)

        circuit.check(MODEL)  # the probe may go
        assert circuit.state(MODEL)["state"] == "half_open"

        circuit.record_failure(MODEL, "still down")
        with pytest.raises(CircuitOpen, match=r"after 6 consecutive failed calls \(last: still down\)"):
            circuit.check(MODEL)

    def test_long_last_error_is_shortened_in_the_message(self, settings):
        settings.SCORING_CIRCUIT_FAILURE_THRESHOLD = 1
        circuit.record_failure(MODEL, "e" * 5000)

        with pytest.raises(CircuitOpen) as raised:
            circuit.check(MODEL)

        assert "e" * 300 + "…)" in str(raised.value)
        assert "e" * 301 not in str(raised.value)
        assert len(JudgeCircuit.objects.get(model=MODEL).last_error) == 2000


def in_threads(count: int, work) -> None:
    """Run ``work`` in ``count`` threads at once, each with its own database connection."""
    start = threading.Barrier(count)
    errors = []

    def run():
        try:
            start.wait()
            work()
        except Exception as exc:  # noqa: BLE001 - reported below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


@pytest.mark.django_db(transaction=True)
def test_state_is_shared_across_database_connections():
    in_threads(1, lambda: fail(5))

    with pytest.raises(CircuitOpen):
        circuit.check(MODEL)


@pytest.mark.django_db(transaction=True)
def test_concurrent_failures_are_all_counted():
    in_threads(4, lambda: fail(5))

    assert JudgeCircuit.objects.get(model=MODEL).consecutive_failures == 20
