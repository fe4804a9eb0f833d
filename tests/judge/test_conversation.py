import json
from decimal import Decimal

import pytest

from scoring.judge.conversation import extract_score
from scoring.judge.prompts import JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS, RESTATE_SCORE_PROMPT
from scoring.models import ScoringStatus
from tests.support.factories import make_score, make_session, run_next_scoring
from tests.support.fake_llm import MIN_CACHED_TOKENS, Error, Reply, Together, prompt_tokens


@pytest.mark.parametrize(
    ("reply", "score", "analysis"),
    [
        ("Analysis here.\n\n67", 67, "Analysis here."),
        ("Analysis.\n67   \n\n  ", 67, "Analysis."),
        ("Analysis.\n**75**", 75, "Analysis."),
        ("Analysis.\n`42`", 42, "Analysis."),
        ("Analysis.\nTotal: 67", 67, "Analysis."),
        ("Analysis.\n0", 0, "Analysis."),
        ("Analysis.\n100", 100, "Analysis."),
        ("42", 42, ""),
        ("Line one\r\nLine two\r\n58\r\n", 58, "Line one\r\nLine two"),
    ],
)
def test_score_is_taken_from_the_last_line(reply, score, analysis):
    assert extract_score(reply) == (score, analysis)


@pytest.mark.parametrize(
    "reply",
    [
        "Analysis.\n101",
        "Analysis.\n-1",
        "Analysis.\n7.5",
        "Analysis.\nScore: 67/100",
        "Analysis.\nseventy",
        "",
        "   \n  ",
        "Score 67 out of a possible hundred.",
        "Analysis.\n999999999999999999999",
    ],
)
def test_reply_without_a_valid_score_line_gives_none_and_keeps_the_whole_text(reply):
    assert extract_score(reply) == (None, reply.rstrip())


# --- Samples (SCORING_JUDGE_SAMPLES): turn 1 k times at once, the median kept -------------------
# Through the service, as a worker runs a scoring, against the fake LLM over real HTTP.

FOLLOWUP = {"role": "user", "content": JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS}
TURN2 = "1. **kubectl-logs** - would have shown the pod's last output."


def turn1(score) -> str:
    return f"Analysis of sample scoring {score}.\n\n{score}"


def judge_with(judge_llm, settings, turn1_steps, *, later=None):
    """Run one scoring with as many samples as ``turn1_steps``: those answer the turn-1
    requests, which must all be in the fake at once; then ``later`` (restates), then turn 2."""
    settings.SCORING_JUDGE_SAMPLES = len(turn1_steps)
    settings.SCORING_LLM_TIMEOUT_S = 15  # the fake holds turn 1 until every sample has sent it
    together = Together(turn1_steps)
    later = dict(later or {})

    def answer(body):
        last = body["messages"][-1]["content"]
        if len(body["messages"]) == 1:
            return together(body)
        return later.get(last, Reply(TURN2, prompt_tokens=50, completion_tokens=5))

    judge_llm.set_default(answer)
    score = make_score(make_session(), ScoringStatus.PENDING)
    run_next_scoring()
    score.refresh_from_db()
    return score


@pytest.mark.django_db
def test_three_samples_score_their_median_and_keep_each_and_their_spread(judge_llm, settings):
    settings.SCORING_UNSTABLE_SPREAD = 15
    steps = [Reply(turn1(score), prompt_tokens=1000, completion_tokens=100) for score in (85, 62, 70)]

    score = judge_with(judge_llm, settings, steps)

    assert (score.status, score.total_score) == ("completed", 70)
    assert score.score_analysis == "Analysis of sample scoring 70."
    assert sorted(score.score_samples) == [62, 70, 85]  # in the order sampled: whichever answered first
    assert (score.score_spread, score.unstable) == (23, True)
    assert (score.input_tokens, score.output_tokens) == (3 * 1000 + 50, 3 * 100 + 5)  # every call counted
    first_turns = [request for request in judge_llm.requests if len(request.messages) == 1]
    assert len(first_turns) == 3 and len({request.messages[0]["content"] for request in first_turns}) == 1
    turn2 = judge_llm.requests[-1]
    assert turn2.messages == [
        first_turns[0].messages[0],
        {"role": "assistant", "content": turn1(70)},
        FOLLOWUP,
    ]
    assert len(judge_llm.requests) == 4


@pytest.mark.django_db
def test_an_even_count_takes_the_lower_middle_and_a_spread_at_the_limit_is_stable(judge_llm, settings):
    settings.SCORING_UNSTABLE_SPREAD = 20

    score = judge_with(judge_llm, settings, [Reply(turn1(80)), Reply(turn1(60))])

    assert (score.total_score, sorted(score.score_samples), score.score_spread) == (60, [60, 80], 20)
    assert score.unstable is False  # unstable means over the limit
    assert judge_llm.requests[-1].messages[1:] == [{"role": "assistant", "content": turn1(60)}, FOLLOWUP]


@pytest.mark.django_db
def test_turn_two_continues_the_median_samples_conversation_restate_included(judge_llm, settings):
    forgetful = "A critique that forgets the number."
    score = judge_with(
        judge_llm, settings, [Reply(turn1(40)), Reply(forgetful), Reply(turn1(90))], later={RESTATE_SCORE_PROMPT: Reply("66")}
    )

    assert (score.total_score, score.score_analysis, sorted(score.score_samples)) == (66, forgetful, [40, 66, 90])
    assert judge_llm.requests[-1].messages[1:] == [
        {"role": "assistant", "content": forgetful},
        {"role": "user", "content": RESTATE_SCORE_PROMPT},
        {"role": "assistant", "content": "66"},
        FOLLOWUP,
    ]


@pytest.mark.django_db
def test_failed_samples_are_left_out_and_shown_as_null(judge_llm, settings):
    settings.SCORING_LLM_MAX_RETRIES = 0
    rejected = Error(400, "invalid request", type="invalid_request_error")

    score = judge_with(judge_llm, settings, [Reply(turn1(74)), rejected, Reply(turn1(70))])

    assert (score.status, score.total_score) == ("completed", 70)  # the lower middle of the two that gave one
    assert sorted(score.score_samples, key=str) == [70, 74, None]
    assert (score.score_spread, score.unstable) == (4, False)


@pytest.mark.django_db
def test_one_sample_left_gives_its_score_and_no_spread(judge_llm, settings):
    score = judge_with(
        judge_llm, settings, [Reply("no number"), Reply(turn1(55))], later={RESTATE_SCORE_PROMPT: Reply("still none")}
    )

    assert (score.status, score.total_score, sorted(score.score_samples, key=str)) == ("completed", 55, [55, None])
    assert (score.score_spread, score.unstable) == (None, False)  # one score measures no spread


@pytest.mark.django_db
def test_the_scoring_fails_when_every_sample_fails(judge_llm, settings):
    settings.SCORING_LLM_MAX_RETRIES = 0
    rejected = Error(400, "invalid request", type="invalid_request_error")

    score = judge_with(judge_llm, settings, [rejected, rejected])

    assert score.status == "failed"
    assert score.error_message == "all 2 judge samples failed: judge LLM rejected the request (400): invalid request"
    assert score.score_samples is None
    assert all(len(request.messages) == 1 for request in judge_llm.requests)  # no turn 2


@pytest.mark.django_db
def test_one_sample_is_todays_two_calls_and_keeps_no_samples(judge_llm, settings):
    assert settings.SCORING_JUDGE_SAMPLES == 1
    judge_llm.push(Reply(turn1(63)), Reply(TURN2))
    score = make_score(make_session(), ScoringStatus.PENDING)
    run_next_scoring()
    score.refresh_from_db()

    assert (score.total_score, score.score_samples, score.score_spread, score.unstable) == (63, None, None, False)
    assert len(judge_llm.requests) == 2


# --- Prompt caching: turn 2 resends turn 1 as it was, for the provider to read it from its cache --


def price(model: str) -> dict:
    """The model's prices in litellm's bundled cost map (what completion_cost charges)."""
    import litellm

    return litellm.model_cost[model]


def score_one(judge_llm, *replies):
    judge_llm.push(*replies)
    score = make_score(make_session(), ScoringStatus.PENDING)
    run_next_scoring()
    score.refresh_from_db()
    return score


@pytest.mark.django_db
def test_turn_two_resends_turn_one_byte_for_byte_and_records_the_cached_prefix(judge_llm):
    score = score_one(judge_llm, Reply(turn1(63)), Reply(TURN2))

    first, second = judge_llm.requests
    assert json.dumps(second.body["messages"][:2]) == json.dumps(
        [*first.body["messages"], {"role": "assistant", "content": turn1(63)}]
    )
    assert "cache_control" not in json.dumps(first.body) + json.dumps(second.body)  # OpenAI caches by itself
    prompt = prompt_tokens(first.messages)
    assert prompt > MIN_CACHED_TOKENS
    assert score.cached_input_tokens == prompt // 128 * 128  # the fake's prompt cache, as OpenAI counts it
    assert score.input_tokens == prompt + prompt_tokens(second.messages)


@pytest.mark.django_db
def test_cost_has_the_cache_discount_of_the_models_price_list(judge_llm, settings):
    settings.SCORING_LLM_MODEL = "openai/gpt-4o"  # priced by litellm, served by the fake
    score = score_one(
        judge_llm,
        Reply(turn1(63), prompt_tokens=20_000, completion_tokens=500, cached_tokens=0),
        Reply(TURN2, prompt_tokens=20_600, completion_tokens=100, cached_tokens=19_968),
    )

    gpt_4o = price("gpt-4o")
    uncached = 20_000 + 20_600 - 19_968
    expected = (
        uncached * gpt_4o["input_cost_per_token"]
        + 19_968 * gpt_4o["cache_read_input_token_cost"]
        + 600 * gpt_4o["output_cost_per_token"]
    )
    assert score.cached_input_tokens == 19_968
    assert score.cost_usd == Decimal(str(expected)).quantize(Decimal("1e-10"))
    assert "cache_control" not in json.dumps(judge_llm.requests[-1].body)


def anthropic_judge(judge_llm, settings):
    """Judge calls to Claude through litellm's Anthropic client, answered by the fake's Messages API."""
    settings.SCORING_LLM_MODEL = "anthropic/claude-sonnet-4-5"
    settings.SCORING_LLM_API_BASE = judge_llm.url  # litellm adds /v1/messages


@pytest.mark.django_db
def test_claude_gets_a_cache_breakpoint_at_the_end_of_turn_one_and_turn_two_reads_it(judge_llm, settings):
    anthropic_judge(judge_llm, settings)
    score = score_one(judge_llm, Reply(turn1(63), completion_tokens=500), Reply(TURN2, completion_tokens=100))

    first, second = judge_llm.requests
    assert first.path == second.path == "/v1/messages"
    [prompt] = first.body["messages"]
    assert prompt["role"] == "user" and prompt["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert json.dumps(second.body["messages"][0]) == json.dumps(prompt)  # the same bytes: the cache's key
    assert [message.get("role") for message in second.body["messages"]] == ["user", "assistant", "user"]
    assert "cache_control" not in json.dumps(second.body["messages"][1:])  # one breakpoint, turn 1's

    written = prompt_tokens([prompt])
    rest = prompt_tokens(second.body["messages"]) - written
    assert (score.input_tokens, score.cached_input_tokens) == (written + written + rest, written)
    claude = price("claude-sonnet-4-5")
    expected = (
        written * claude["cache_creation_input_token_cost"]  # turn 1 writes the prompt to the cache
        + written * claude["cache_read_input_token_cost"]  # turn 2 reads it
        + rest * claude["input_cost_per_token"]
        + 600 * claude["output_cost_per_token"]
    )
    assert score.cost_usd == Decimal(str(expected)).quantize(Decimal("1e-10"))


@pytest.mark.django_db
def test_claude_samples_share_the_breakpoint_and_turn_two_continues_the_median(judge_llm, settings):
    anthropic_judge(judge_llm, settings)
    settings.SCORING_JUDGE_SAMPLES = 3
    settings.SCORING_LLM_TIMEOUT_S = 15  # the fake holds turn 1 until every sample has sent it
    together = Together([Reply(turn1(score)) for score in (85, 62, 70)])
    judge_llm.set_default(lambda body: together(body) if len(body["messages"]) == 1 else Reply(TURN2))
    score = make_score(make_session(), ScoringStatus.PENDING)
    run_next_scoring()
    score.refresh_from_db()

    assert (score.status, score.total_score, sorted(score.score_samples)) == ("completed", 70, [62, 70, 85])
    *first_turns, turn2 = judge_llm.requests
    prompts = {json.dumps(request.body["messages"][0]) for request in [*first_turns, turn2]}
    assert len(first_turns) == 3 and len(prompts) == 1 and "cache_control" in prompts.pop()
    assert turn2.body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": turn1(70)}],
    }
    assert score.cached_input_tokens >= prompt_tokens(turn2.body["messages"][:1])  # turn 2 at least
