"""Benchmark: input tokens per scoring, against the investigation's own, with and without prompt caching.

Run from the repository root:  .venv/bin/python bench/bench_tokens.py

Each sample session (scoring/samples/, and the real tarsy-bot documents in
../shared/data/tarsy-bot/ when that folder is there; ``--documents`` adds folders) is judged
by the service's own conversation (``conversation.run_judge``: turn 1, turn 2) against the fake
judge on loopback, which answers as the demo judge does and keeps a prompt cache as providers
do (tests/support/fake_llm.py). Four runs per session, side by side: OpenAI's way
(``openai/gpt-4o``: the provider caches the repeated prefix itself) and Anthropic's
(``anthropic/claude-sonnet-4-5``: turn 1's prompt marked with ``cache_control``), each once
with the fake's cache and once with a provider that caches nothing. Tokens are the fake's count
(4 characters a token) for the investigation and for what was sent alike; the costs are
litellm's ``completion_cost`` with its bundled prices for those two models. Prints Markdown
tables; see docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from common import REPO, machine_description, setup_django, sqlite_url, work_folder

SAMPLES = REPO / "scoring" / "samples"
REAL_DOCUMENTS = REPO.parent / "shared" / "data" / "tarsy-bot"
MODELS = {"OpenAI gpt-4o": "openai/gpt-4o", "Claude Sonnet 4.5": "anthropic/claude-sonnet-4-5"}


def plain(messages: list[dict]) -> list[dict]:
    """The messages with content blocks (Anthropic's wire format) as plain text, for the demo judge."""
    return [
        {**message, "content": "".join(block.get("text", "") for block in message["content"])}
        if isinstance(message.get("content"), list)
        else message
        for message in messages
    ]


def judge(session, fake, model: str, *, cache: bool) -> dict:
    """One scoring of ``session`` by ``model`` against the fake; its tokens and cost."""
    from django.test import override_settings

    from scoring.judge import conversation
    from scoring.judge.demo_judge import demo_reply
    from tests.support.fake_llm import Reply

    def answer(body):
        content = demo_reply(plain(body["messages"]))
        return Reply(content) if cache else Reply(content, cached_tokens=0)  # 0: the provider cached nothing

    fake.reset(default=answer)
    # The fake's Messages API is at <url>/v1/messages, its chat completions at <url>/v1/chat/completions.
    api_base = fake.url if model.startswith("anthropic/") else f"{fake.url}/v1"
    with override_settings(
        SCORING_LLM_MODEL=model,
        SCORING_LLM_API_BASE=api_base,
        SCORING_LLM_API_KEY="bench",
        SCORING_JUDGE_SAMPLES=1,
    ):
        result = conversation.run_judge(session, on_phase=lambda phase: None)
    return {"input": result.input_tokens, "cached": result.cached_input_tokens, "cost": result.cost_usd}


def documents(folders: list[Path]) -> list[Path]:
    return [path for folder in folders if folder.is_dir() for path in sorted(folder.glob("*.json"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--documents", type=Path, action="append", default=[], help="another folder of sessions"
    )
    args = parser.parse_args()

    machine = machine_description()
    with work_folder() as folder:
        setup_django(sqlite_url(folder))
        from django.core.management import call_command

        from scoring.judge.rendering import render_investigation
        from scoring.models import AlertSession
        from scoring.tarsy.ingest import parse_document
        from tests.support.fake_llm import CHARS_PER_TOKEN, FakeLLMServer

        call_command("migrate", verbosity=0)  # the circuit breaker's table
        fake = FakeLLMServer().start()
        rows = []
        try:
            for path in documents([SAMPLES, REAL_DOCUMENTS, *args.documents]):
                session = AlertSession(**parse_document(json.loads(path.read_text(encoding="utf-8"))))
                investigation = len(render_investigation(session)) // CHARS_PER_TOKEN
                runs = {
                    (name, cache): judge(session, fake, model, cache=cache)
                    for name, model in MODELS.items()
                    for cache in (False, True)
                }
                rows.append((path.name, investigation, runs))
                print(f"judged {path.name}", file=sys.stderr, flush=True)
        finally:
            fake.stop()

    print(machine)
    print()
    print_tokens(rows)
    print()
    print_costs(rows)


def print_tokens(rows) -> None:
    print("Input tokens over both turns, against the investigation's own (x: times the investigation)")
    print()
    print(
        "| Session | Investigation | Sent, both turns | Cached: OpenAI's way | Cached: Claude, cache_control "
        "| Not cached: OpenAI / Claude |"
    )
    print("|---|---|---|---|---|---|")
    ratios = {"sent": [], "openai": [], "claude": []}
    for name, investigation, runs in rows:
        sent = runs["OpenAI gpt-4o", False]["input"]
        openai, claude = runs["OpenAI gpt-4o", True], runs["Claude Sonnet 4.5", True]
        ratios["sent"].append(sent / investigation)
        ratios["openai"].append((openai["input"] - openai["cached"]) / investigation)
        ratios["claude"].append((claude["input"] - claude["cached"]) / investigation)
        print(
            f"| {name[:60]} | {investigation:,} | {sent:,} ({sent / investigation:.2f}x) "
            f"| {openai['cached']:,} ({openai['cached'] / openai['input']:.0%}) "
            f"| {claude['cached']:,} ({claude['cached'] / claude['input']:.0%}) "
            f"| {ratios['openai'][-1]:.2f}x / {ratios['claude'][-1]:.2f}x |"
        )
    print(
        f"| **median** | | {statistics.median(ratios['sent']):.2f}x | | | "
        f"{statistics.median(ratios['openai']):.2f}x / {statistics.median(ratios['claude']):.2f}x |"
    )


def print_costs(rows) -> None:
    print("Cost of one scoring (litellm's completion_cost), without and with the prompt cache")
    print()
    print("| Session | gpt-4o: no cache | gpt-4o: cache | saved | Claude: no cache | Claude: cache | saved |")
    print("|---|---|---|---|---|---|---|")
    saved = {name: [] for name in MODELS}
    for name, _, runs in rows:
        cells = []
        for model in MODELS:
            without, with_cache = runs[model, False]["cost"], runs[model, True]["cost"]
            saved[model].append(1 - with_cache / without)
            cells.append(f"${without:.4f} | ${with_cache:.4f} | {saved[model][-1]:.0%}")
        print(f"| {name[:60]} | {' | '.join(cells)} |")
    print(f"| **median** | | | {statistics.median(saved['OpenAI gpt-4o']):.0%} | | | "
          f"{statistics.median(saved['Claude Sonnet 4.5']):.0%} |")


if __name__ == "__main__":
    main()
