"""Pacing of judge calls per model (scoring/judge/pacing.py): shared by every connection and
process; and, with real worker processes against an account-wide quota, what it is for."""

import threading
import time

import pytest
from django.db import connection

from scoring import services
from scoring.judge import circuit, pacing
from scoring.models import JudgePacing, ScoringStatus, SessionScore
from tests.support.factories import make_score, make_session
from tests.support.fake_llm import AccountQuota, Reply
from tests.support.workers import wait_for
from tests.support.judge_replies import evaluated

MODEL = "openai/fake-judge"
TURN1 = evaluated("Logical Flow: 14/25\nConsistency: 17/25\nTool Relevance: 12/25\nSynthesis Quality: 13/25\n\n56")


@pytest.mark.django_db
def test_without_known_limits_a_call_waits_only_for_the_providers_last_retry_after(settings):
    assert pacing.take_turn(MODEL, 1000, longest_wait_s=60) == 0

    pacing.hold(MODEL, 30)
    pacing.hold(MODEL, 5)  # a shorter wait told later does not shorten it

    assert 29 < pacing.take_turn(MODEL, 1000, longest_wait_s=60) <= 30
    assert pacing.take_turn("openai/another-model", 1000, longest_wait_s=60) == 0


@pytest.mark.django_db
def test_known_limits_space_the_calls_by_requests_and_by_prompt_tokens(settings):
    settings.SCORING_LLM_RPM = 120  # a request every 0.5 s
    started_us = time.time_ns() // 1000
    waits = [pacing.take_turn(MODEL, 10, longest_wait_s=60) for _ in range(3)]
    ended_us = time.time_ns() // 1000
    assert waits[0] == 0 and 0 < waits[1] < waits[2]
    # Three turns 0.5 s apart from the first: the next one is 1.5 s after it.
    assert started_us + 1_500_000 <= JudgePacing.objects.get(model=MODEL).next_request_us <= ended_us + 1_500_000

    settings.SCORING_LLM_RPM = 0
    settings.SCORING_LLM_TPM = 60_000  # 1,000 tokens a second
    started_us = time.time_ns() // 1000
    waits = [pacing.take_turn("openai/by-tokens", 3000, longest_wait_s=60) for _ in range(2)]
    ended_us = time.time_ns() // 1000
    assert waits[0] == 0 and waits[1] > 2
    # Two prompts of 3,000 tokens, 3 s each.
    assert started_us + 6_000_000 <= JudgePacing.objects.get(model="openai/by-tokens").next_token_us <= ended_us + 6_000_000


@pytest.mark.django_db
def test_limits_the_provider_announced_pace_the_calls_at_a_share_of_them_unless_set(settings):
    assert pacing.limits(MODEL) == (0, 0)

    pacing.learn_limits(MODEL, 120, None)
    pacing.learn_limits(MODEL, None, 100_000)  # an answer that announces one limit keeps the other
    assert pacing.limits(MODEL) == (114, 95_000)
    assert pacing.limits("openai/another-model") == (0, 0)
    started_us = time.time_ns() // 1000
    pacing.take_turn(MODEL, 10, longest_wait_s=60)
    # The next request 60 / 114 s later.
    assert JudgePacing.objects.get(model=MODEL).next_request_us - started_us >= 60_000_000 // 114

    settings.SCORING_LLM_RPM = 30  # a limit set wins over the announced one
    assert pacing.limits(MODEL) == (30, 95_000)
    pacing.learn_limits(MODEL, 1, None)  # a limit under the share's rounding is still one
    settings.SCORING_LLM_RPM = 0
    assert pacing.limits(MODEL) == (1, 95_000)


@pytest.mark.django_db
def test_a_turn_further_than_the_caller_may_wait_is_not_taken(settings):
    settings.SCORING_LLM_RPM = 6  # a request every 10 s
    pacing.take_turn(MODEL, 10, longest_wait_s=60)

    assert 9 < pacing.take_turn(MODEL, 10, longest_wait_s=1) <= 10  # refused: not taken
    assert 9 < pacing.take_turn(MODEL, 10, longest_wait_s=60) <= 10  # so the next caller has it


@pytest.mark.django_db(transaction=True)
def test_concurrent_callers_on_connections_of_their_own_each_take_a_turn_of_their_own(settings):
    settings.SCORING_LLM_RPM = 600  # a request every 0.1 s
    waits, lock = [], threading.Lock()

    def take_turns():
        try:
            for _ in range(5):
                wait = pacing.take_turn(MODEL, 10, longest_wait_s=60)
                with lock:
                    waits.append(wait)
        finally:
            connection.close()

    threads = [threading.Thread(target=take_turns) for _ in range(4)]
    started_us = time.time_ns() // 1000
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ended_us = time.time_ns() // 1000

    assert len(waits) == 20
    # 20 turns 0.1 s apart from the first (taken between start and end): a turn taken twice
    # would leave the bucket 0.1 s short.
    next_turn_us = JudgePacing.objects.get(model=MODEL).next_request_us
    assert started_us + 2_000_000 <= next_turn_us <= ended_us + 2_000_000


def queue_scorings(count: int) -> list:
    return [make_score(make_session(), ScoringStatus.PENDING).score_id for _ in range(count)]


def settled(score_ids) -> bool:
    return not SessionScore.objects.filter(pk__in=score_ids, status__in=ScoringStatus.active_values()).exists()


def batch_on_two_clusters(start_worker, judge_llm, quota: AccountQuota, count: int, **settings) -> list[str]:
    """``count`` scorings judged by two worker clusters against ``quota``; their statuses once settled."""
    judge_llm.set_default(quota)
    env = {**judge_llm.env(), "SCORING_WORKER_POLL_S": "0.2", "SCORING_LLM_TIMEOUT_S": "10", **settings}
    start_worker(**env)
    start_worker(**env)
    score_ids = queue_scorings(count)
    services.wake_workers(count)

    wait_for(lambda: settled(score_ids), timeout_s=120, what="the batch to end")
    return list(SessionScore.objects.filter(pk__in=score_ids).values_list("status", flat=True))


@pytest.mark.processes
def test_two_worker_clusters_complete_a_batch_under_an_account_quota_with_the_breaker_closed(start_worker, judge_llm):
    quota = AccountQuota(Reply(TURN1), requests_per_s=4)

    assert batch_on_two_clusters(start_worker, judge_llm, quota, 16) == ["completed"] * 16
    assert quota.rate_limited > 0  # the quota held calls back
    assert quota.answered == 32  # and no scoring was judged twice
    assert circuit.state(judge_llm.env()["SCORING_LLM_MODEL"])["state"] == "closed"


@pytest.mark.processes
def test_with_the_known_limit_two_worker_clusters_complete_a_batch_paced_across_processes(start_worker, judge_llm):
    quota = AccountQuota(Reply(TURN1), requests_per_s=4)

    # 180 a minute: one call every 1/3 s across both clusters, under the 4 a second the provider allows.
    statuses = batch_on_two_clusters(start_worker, judge_llm, quota, 8, SCORING_LLM_RPM="180")

    assert statuses == ["completed"] * 8
    assert quota.answered == 16
    assert circuit.state(judge_llm.env()["SCORING_LLM_MODEL"])["state"] == "closed"


@pytest.mark.processes
def test_worker_clusters_pace_to_the_limit_the_provider_announces(start_worker, judge_llm):
    quota = AccountQuota(Reply(TURN1), requests_per_s=4, announce=True)

    no_limit_set = {"SCORING_LLM_RPM": "0", "SCORING_LLM_TPM": "0"}  # the one the answers announce
    statuses = batch_on_two_clusters(start_worker, judge_llm, quota, 16, **no_limit_set)

    assert statuses == ["completed"] * 16
    assert quota.answered == 32
    model = judge_llm.env()["SCORING_LLM_MODEL"]
    # The calls took turns of the shared request bucket, which only a known limit starts.
    assert JudgePacing.objects.get(model=model).next_request_us > 0
    assert circuit.state(model)["state"] == "closed"
