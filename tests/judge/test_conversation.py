import json
from decimal import Decimal

import pytest

from scoring import services
from scoring.judge import replies, sampling
from scoring.judge.conversation import extract_score
from scoring.judge.prompts import EVALUATION_FOLLOWUP_PROMPT, JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS, RESTATE_SCORE_PROMPT
from scoring.models import ScoreTranscript, ScoringStatus
from tests.support.factories import make_score, make_session, run_next_scoring
from tests.support.fake_llm import MIN_CACHED_TOKENS, Error, Reply, Together, prompt_tokens
from tests.support.judge_replies import BREAKDOWN_ALONE, SCORE_ALONE, TOTAL_SCORE_LINE, evaluated


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
    return evaluated(f"Analysis of sample scoring {score}.\n\n{score}")


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
    assert score.score_analysis == evaluated("Analysis of sample scoring 70.")
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
    forgetful = evaluated("A critique that forgets the number.")
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


# --- A score without an evaluation: asked for once, else marked and turn 2 not asked ----------

EVALUATION_FOLLOWUP = {"role": "user", "content": EVALUATION_FOLLOWUP_PROMPT}


@pytest.mark.django_db
def test_a_score_alone_is_asked_once_for_the_evaluation_in_the_same_conversation(judge_llm):
    later = evaluated(BREAKDOWN_ALONE.replace("54**", "52**"))
    score = score_one(judge_llm, Reply(SCORE_ALONE), Reply(later), Reply(TURN2))

    assert (score.status, score.total_score, score.analysis_missing) == ("completed", 52, False)
    assert score.score_analysis == extract_score(later)[1]
    assert score.dimensions == {"logical_flow": 14, "consistency": 15, "tool_relevance": 12, "synthesis_quality": 13}
    first, followup, turn2 = judge_llm.requests
    assert followup.messages == [*first.messages, {"role": "assistant", "content": SCORE_ALONE}, EVALUATION_FOLLOWUP]
    assert turn2.messages == [*followup.messages, {"role": "assistant", "content": later}, FOLLOWUP]
    assert not any(replies.ANALYSIS_MISSING_WARNING == warning for warning in score.warnings)


@pytest.mark.django_db
def test_a_score_still_without_an_evaluation_is_marked_and_turn_two_is_not_asked(judge_llm):
    score = score_one(judge_llm, Reply(TOTAL_SCORE_LINE), Reply(BREAKDOWN_ALONE))

    assert (score.status, score.total_score, score.analysis_missing) == ("completed", 54, True)
    assert score.missing_tools_analysis is None  # not asked: not "nothing missing"
    assert list(score.missing_tools.all()) == []
    assert replies.ANALYSIS_MISSING_WARNING in score.warnings
    assert score.dimensions["logical_flow"] == 14  # the follow-up's breakdown, kept
    assert len(judge_llm.requests) == 2
    assert judge_llm.requests[-1].messages[-1] == EVALUATION_FOLLOWUP
    assert score.session.latest_completed_analysis_missing is True


@pytest.mark.django_db
def test_an_evaluation_without_a_score_line_in_the_follow_up_keeps_turn_ones_score(judge_llm):
    score = score_one(judge_llm, Reply(SCORE_ALONE), Reply(evaluated("No number this time.")), Reply(TURN2))

    assert (score.total_score, score.analysis_missing) == (46, False)
    assert score.score_analysis == evaluated("No number this time.")
    assert len(judge_llm.requests) == 3


@pytest.mark.django_db
def test_the_median_is_of_the_samples_with_an_evaluation(judge_llm, settings):
    score = judge_with(
        judge_llm, settings, [Reply("90"), Reply(turn1(60)), Reply("95")], later={EVALUATION_FOLLOWUP_PROMPT: Reply("91")}
    )

    # Asked again, the two without one gave a score alone once more (it replaces theirs): the median
    # of every sample would be 91, of those with an evaluation it is 60; the spread is of every sample.
    assert (score.total_score, score.analysis_missing) == (60, False)
    assert (sorted(score.score_samples), score.score_spread) == ([60, 91, 91], 31)
    assert judge_llm.requests[-1].messages[-2:] == [{"role": "assistant", "content": turn1(60)}, FOLLOWUP]


# --- Sampling settings: sent, recorded, and part of the judge's identity ----------------------


@pytest.mark.django_db
def test_temperature_and_seed_are_sent_with_every_call_and_recorded_on_the_score(judge_llm, settings):
    settings.SCORING_LLM_TEMPERATURE, settings.SCORING_LLM_SEED = 0.2, 1234
    score = score_one(judge_llm, Reply(turn1(63)), Reply(TURN2))

    assert [(request.body["temperature"], request.body["seed"]) for request in judge_llm.requests] == [(0.2, 1234)] * 2
    assert (score.judge_temperature, score.judge_seed) == (0.2, 1234)
    assert score.session.latest_completed_judge_temperature == 0.2


@pytest.mark.django_db
def test_settings_set_to_none_are_not_sent_and_recorded_as_null(judge_llm, settings):
    settings.SCORING_LLM_TEMPERATURE, settings.SCORING_LLM_SEED = None, None
    score = score_one(judge_llm, Reply(turn1(63)), Reply(TURN2))

    assert all("temperature" not in request.body and "seed" not in request.body for request in judge_llm.requests)
    assert (score.judge_temperature, score.judge_seed) == (None, None)


@pytest.mark.parametrize(
    ("model", "sent"),
    [
        ("openai/fake-judge", sampling.Sampling(0.0, 7)),
        ("gemini/gemini-2.5-pro", sampling.Sampling(0.0, 7)),
        ("anthropic/claude-sonnet-4-20250514", sampling.Sampling(0.0, None)),  # Claude takes no seed
        ("o3", sampling.Sampling(None, 7)),  # takes only its default temperature
    ],
)
def test_a_setting_is_sent_only_where_the_model_takes_it(model, sent, settings):
    settings.SCORING_LLM_MODEL, settings.SCORING_LLM_TEMPERATURE, settings.SCORING_LLM_SEED = model, 0.0, 7
    assert sampling.judge_sampling() == sent


def test_the_judge_label_names_the_model_and_the_settings_sent():
    assert sampling.judge_label("openai/qwen", 0.0, 0) == "openai/qwen (temperature 0, seed 0)"
    assert sampling.judge_label("anthropic/claude", 0.3, None) == "anthropic/claude (temperature 0.3)"
    assert sampling.judge_label("gemini/gemini-2.5-pro", None, None) == "gemini/gemini-2.5-pro"


# --- Transcripts: what the judge was sent and what it wrote --------------------------------------


@pytest.mark.django_db
def test_the_transcript_keeps_every_message_as_sent_and_every_raw_reply(judge_llm, settings):
    settings.SCORING_LLM_TEMPERATURE, settings.SCORING_LLM_SEED = 0.0, 5
    later = evaluated("Now with the analysis.\n\n58")
    score = score_one(judge_llm, Reply(TOTAL_SCORE_LINE), Reply(later), Reply(TURN2))

    stored = ScoreTranscript.objects.get(score=score).transcript
    assert (stored["model"], stored["temperature"], stored["seed"]) == ("openai/fake-judge", 0.0, 5)
    (conversation,) = stored["conversations"]
    assert conversation["error"] is None
    assert conversation["messages"] == [
        *judge_llm.requests[-1].messages,
        {"role": "assistant", "content": TURN2},
    ]
    assert [message["content"] for message in conversation["messages"][1:]] == [
        TOTAL_SCORE_LINE, EVALUATION_FOLLOWUP_PROMPT, later, JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS, TURN2,
    ]  # fmt: skip


@pytest.mark.django_db
def test_a_failed_scoring_keeps_its_transcript_with_the_error(judge_llm):
    score = score_one(judge_llm, Reply("No number here."), Reply("Still none."))

    assert score.status == "failed"
    (conversation,) = ScoreTranscript.objects.get(score=score).transcript["conversations"]
    assert [message["content"] for message in conversation["messages"][1:]] == [
        "No number here.", RESTATE_SCORE_PROMPT, "Still none.",
    ]  # fmt: skip


@pytest.mark.django_db
def test_every_sample_has_its_conversation_in_the_transcript(judge_llm, settings):
    score = judge_with(judge_llm, settings, [Reply(turn1(80)), Reply(turn1(60))])

    conversations = ScoreTranscript.objects.get(score=score).transcript["conversations"]
    replies_written = sorted(conversation["messages"][1]["content"] for conversation in conversations)
    assert replies_written == sorted([turn1(80), turn1(60)])
    assert sorted(len(conversation["messages"]) for conversation in conversations) == [2, 4]  # turn 2 after 60's


@pytest.mark.django_db
def test_no_transcript_is_kept_with_a_retention_of_zero_and_old_ones_are_pruned(judge_llm, settings):
    settings.SCORING_TRANSCRIPT_RETENTION_DAYS = 0
    assert not ScoreTranscript.objects.filter(score=score_one(judge_llm, Reply(turn1(63)), Reply(TURN2))).exists()

    settings.SCORING_TRANSCRIPT_RETENTION_DAYS = 2
    kept = score_one(judge_llm, Reply(turn1(63)), Reply(TURN2))
    recorded = ScoreTranscript.objects.get(score=kept).recorded_at_us
    assert services.prune_transcripts(now=recorded + 2 * 86_400_000_000 - 1) == 0
    assert services.prune_transcripts(now=recorded + 2 * 86_400_000_000 + 1) == 1
    assert not ScoreTranscript.objects.exists()


@pytest.mark.django_db
def test_every_judge_call_caps_its_reply_at_the_room_fitting_keeps_for_it(judge_llm):
    score_one(judge_llm, Reply("**Total Score:** 63"), Reply(turn1(63)), Reply(TURN2))  # asked for its evaluation

    assert [request.body.get("max_tokens") for request in judge_llm.requests] == [sampling.REPLY_MAX_TOKENS] * 3


@pytest.mark.parametrize(
    ("model", "cap"),
    [
        ("openai/fake-judge", sampling.REPLY_MAX_TOKENS),
        ("gpt-4.1", sampling.REPLY_MAX_TOKENS),
        ("o3", None),  # its hidden reasoning would count against the cap
        ("gemini/gemini-2.5-pro", None),
        ("anthropic/claude-sonnet-4-20250514", None),
    ],
)
def test_the_reply_cap_is_not_sent_to_reasoning_models(model, cap, settings):
    settings.SCORING_LLM_MODEL = model
    assert sampling.judge_reply_cap() == cap
