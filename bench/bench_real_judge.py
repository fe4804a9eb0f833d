"""Benchmark: a real model as the judge, session by session: tokens, time, what it replies, how far its scores move.

Run from the repository root (CPU-bound for minutes a session: nice it on a shared machine):
    nice .venv/bin/python bench/bench_real_judge.py                       # the whole set, 3 repeats
    nice .venv/bin/python bench/bench_real_judge.py --only 00_ --only 10_ --repeats 2   # a quick look

The local model (``manage.py local_model``; Qwen2.5-Coder-1.5B-Instruct by default, installed
first if it is not) runs on llama.cpp's server on loopback, behind the tests' recording proxy
(tests/support/local_model.py), with the window it was made for (32,768 tokens, or
``--context-tokens``) and the service's sampling settings (SCORING_LLM_TEMPERATURE,
SCORING_LLM_SEED). Each session
(scoring/samples/, the real tarsy-bot documents in ../shared/data/tarsy-bot/ when that folder
is there, ``--documents`` adds folders) is judged ``--repeats`` times by the service's own
conversation (``conversation.run_judge``). Per session: the turn-1 prompt's tokens by litellm's
default counter and by the model's (its ``/tokenize``, which the service counts with), and what
the model reports having read with its chat template; seconds per scoring; the shape of turn 1's
reply, whether the judge was asked for its evaluation and gave it, and turn 2's reply; the
scores and their spread. Prints Markdown tables; see docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from common import REPO, machine_description, setup_django, spread, sqlite_url, work_folder

SAMPLES = REPO / "scoring" / "samples"
REAL_DOCUMENTS = REPO.parent / "shared" / "data" / "tarsy-bot"


def documents(folders: list[Path]) -> list[Path]:
    return [path for folder in folders if folder.is_dir() for path in sorted(folder.glob("*.json"))]


def turn1_shape(reply: str) -> str:
    """What a turn-1 reply holds besides its score line."""
    from scoring.judge import conversation, replies

    score, analysis = conversation.extract_score(reply)
    if score is None:
        return "no score line"
    words = len(analysis.split())
    dimensions = replies.parse_dimensions(analysis) or {}
    found = sum(value is not None for value in dimensions.values())
    if not words:
        return "score only"
    breakdown = f", breakdown {found}/4" if found else ""
    return f"{words} words{breakdown}"


def turn2_shape(reply: str) -> str:
    from scoring.judge import replies

    tools = replies.parse_missing_tools(reply)
    return f"{len(tools)} tools" if tools else "none named"


def judge_once(session, judge) -> dict:
    """One scoring of ``session``; what the proxy saw of it."""
    from scoring.judge import conversation, errors, fitting, local_model, tokens
    from scoring.judge.prompts import EVALUATION_FOLLOWUP_PROMPT, JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS

    judge.proxy.forget()
    started = time.monotonic()
    try:
        result = conversation.run_judge(session, on_phase=lambda phase: None)
        outcome = {
            "score": result.total_score,
            "coverage": result.input_coverage,
            "evaluated": not result.analysis_missing,
        }
    except errors.JudgeLLMError as error:
        outcome = {"score": None, "error": str(error)[:120]}
    outcome["seconds"] = time.monotonic() - started
    calls = judge.proxy.chat_calls()
    if calls:
        prompt = calls[0].messages[0]["content"]
        prompt = prompt if isinstance(prompt, str) else "".join(block.get("text", "") for block in prompt)
        answered = [call for call in calls if call.status == 200]
        contents = [call.answer["choices"][0]["message"]["content"] for call in answered]
        asked = [call.messages[-1]["content"] for call in answered]
        asked_evaluation = EVALUATION_FOLLOWUP_PROMPT in asked
        outcome |= {
            "ours": tokens.litellm_count(prompt),
            "models": len(local_model.tokenize(judge.server.url, prompt)),
            "read": answered[0].answer["usage"]["prompt_tokens"] if answered else None,
            "calls": len(calls),
            "turn1": turn1_shape(contents[0]) if contents else "-",
            "evaluation": (
                "-" if "evaluated" not in outcome
                else ("asked: " if asked_evaluation else "") + ("given" if outcome["evaluated"] else "none")
            ),
            "turn2": (
                turn2_shape(contents[-1]) if asked and asked[-1] == JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS else "not asked"
            ),
            "window": fitting.context_window(),
        }
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="a local model (manage.py local_model)")
    parser.add_argument("--repeats", type=int, default=3, help="scorings of each session")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="only the sessions whose file name holds this (repeatable)",
    )
    parser.add_argument(
        "--documents", type=Path, action="append", default=[], help="another folder of sessions"
    )
    parser.add_argument("--threads", type=int, help="the server's CPU threads (default: one a core)")
    parser.add_argument(
        "--context-tokens",
        type=int,
        help="the server's window (default: the model's, 32,768); a smaller one is fitted to, and is quicker",
    )
    args = parser.parse_args()

    machine = machine_description()
    paths = [
        path
        for path in documents([SAMPLES, REAL_DOCUMENTS, *args.documents])
        if not args.only or any(part in path.name for part in args.only)
    ]
    with work_folder() as folder:
        setup_django(sqlite_url(folder))
        from django.conf import settings
        from django.core.management import call_command
        from django.test import override_settings

        from scoring.judge import local_model
        from scoring.models import AlertSession
        from scoring.tarsy.ingest import parse_document
        from tests.support.local_model import RealJudge, RecordingProxy
        from tests.support.throwaway_servers import free_port

        call_command("migrate", verbosity=0)  # the circuit breaker's and the pacing's tables
        model = local_model.model_named(args.model)
        home = local_model.home_in(settings.VAR_DIR)
        if local_model.installed_model(model, home) is None:
            local_model.install(model, home, say=lambda message: print(f"==> {message}", file=sys.stderr))
        window = {"context_tokens": args.context_tokens} if args.context_tokens else {}
        server = local_model.launch(
            model, home, port=free_port(), threads=args.threads, log_dir=folder, **window
        )
        proxy = RecordingProxy(server.url).start()
        judge = RealJudge(server, proxy)
        rows = []
        try:
            environment = server.judge_environment()
            with override_settings(
                SCORING_LLM_MODEL=environment["SCORING_LLM_MODEL"],
                SCORING_LLM_API_BASE=f"{proxy.url}/v1",
                SCORING_LLM_API_KEY=environment["SCORING_LLM_API_KEY"],
                SCORING_LLM_CONTEXT_TOKENS=server.context_tokens,
                SCORING_LLM_TIMEOUT_S=3600,
                SCORING_JUDGE_SAMPLES=1,
            ):
                for path in paths:
                    session = AlertSession(**parse_document(json.loads(path.read_text(encoding="utf-8"))))
                    runs = []
                    for repeat in range(args.repeats):
                        runs.append(judge_once(session, judge))
                        print(f"{path.name} #{repeat + 1}: {runs[-1]}", file=sys.stderr, flush=True)
                    rows.append((path.name, runs))
        finally:
            proxy.stop()
            server.stop()

    print(machine)
    print(
        f"{model.title}, llama.cpp server (xllamacpp), window {server.context_tokens:,} tokens, "
        f"{args.repeats} scorings a session"
    )
    print()
    print_rows(rows)


def print_rows(rows) -> None:
    print(
        "| Session | Prompt tokens: litellm's / model's (ratio) / read with template | Seconds per scoring "
        "| Calls | Turn 1 replies | Evaluation | Turn 2 replies | Scores | Spread |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for name, runs in rows:
        first = next((run for run in runs if "ours" in run), {})
        if first:
            ratios.append(first["models"] / first["ours"])
            tokens = f"{first['ours']:,} / {first['models']:,} ({ratios[-1]:.2f}) / {first['read'] or '-'}"
        else:
            tokens = "-"
        scores = [run["score"] for run in runs]
        scored = [score for score in scores if score is not None]
        failures = [run["error"] for run in runs if "error" in run]
        print(
            f"| {name[:50]} | {tokens} | {spread([run['seconds'] for run in runs], 0)} "
            f"| {'/'.join(str(run.get('calls', 0)) for run in runs)} "
            f"| {'; '.join(run.get('turn1', '-') for run in runs)} "
            f"| {'; '.join(run.get('evaluation', '-') for run in runs)} "
            f"| {'; '.join(run.get('turn2', '-') for run in runs)} "
            f"| {', '.join('failed' if score is None else str(score) for score in scores)} "
            f"| {max(scored) - min(scored) if len(scored) > 1 else '-'} |"
        )
        for failure in dict.fromkeys(failures):
            print(f"|  | failed: {failure} | | | | | | | |")
    if ratios:
        print(f"| **median** | model's / litellm's {statistics.median(ratios):.2f} | | | | | | | |")


if __name__ == "__main__":
    main()
