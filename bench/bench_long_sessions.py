"""Benchmark: scoring sessions with a long tool output against judges of several context windows.

Run from the repository root:  .venv/bin/python bench/bench_long_sessions.py
Two shapes, each grown to 1, 3 and 20 MB of log lines (``tests/support/long_sessions.py``):
"tool result", a real tarsy-bot session (``../shared/data/tarsy-bot/`` beside the clone) whose
``get_logs`` result is the long output; "ReAct", the three-stage ReAct sample whose output is
carried as ReAct sessions carry it, in the agent's next input (``Observation: ...``), half of
it in the agent's messages only (``with_long_observations``). Each is scored through the service (ingest, request, the worker's judge job, on SQLite
in a temporary folder) against the fake judge enforcing a 32k, 128k and 1M-token window
with OpenAI's context-length error (``tests/support/fake_llm.ContextWindow``, counting as
OpenAI does for gpt-4o). Prints, per size and window: whether the scoring completed, its
input_coverage, the most tokens one request sent (as the fake counted them; never over the
window), and the time to render and fit the prompt (median of ``--runs``) beside rendering
alone and beside one exact count of the whole investigation with litellm's ``token_counter``
(what fitting avoids by estimating). See docs/performance.md ("Long sessions").
"""

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import machine_description, setup_django, sqlite_url, work_folder  # noqa: E402

DOCUMENTS = REPO.parent / "shared" / "data" / "tarsy-bot"
DEFAULT_DOCUMENT = "parallel_multi_agent"
TURN1 = (
    "However, the agent concluded before reading the whole tool output: it never checked the previous "
    "container's logs, and its confidence is higher than the evidence it gathered supports. A rigorous "
    "investigation would have listed the events and compared both runs before naming the cause.\n\n"
    "## Score breakdown\nLogical Flow: 18/25\nConsistency: 18/25\nTool Relevance: 17/25\n"
    "Synthesis Quality: 17/25\n\n70"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="1,3,20", help="tool output sizes, MB (comma-separated)")
    parser.add_argument("--windows", default="32000,128000,1000000", help="context windows, tokens")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of render + fit per case")
    parser.add_argument("--document", default=DEFAULT_DOCUMENT, help="file name prefix of the real document")
    args = parser.parse_args()
    sizes = [float(size) for size in args.sizes_mb.split(",")]
    windows = [int(window) for window in args.windows.split(",")]
    (path,) = [p for p in sorted(DOCUMENTS.glob("*.json")) if p.name.startswith(args.document)]
    document = json.loads(path.read_text(encoding="utf-8"))

    with work_folder() as folder:
        setup_django(sqlite_url(folder))
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        rows = run_cases(document, sizes, windows, args.runs)
    print(machine_description())
    print(f"\nDocument: {path.name}; each case scored once, fit timed over {args.runs} runs (median).\n")
    print(
        "| shape | output | window | completed | input_coverage | most tokens in one request "
        "| render | render + fit | exact count of the whole |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['shape']} | {row['size']:g} MB | {row['window']:,} | {row['completed']} | {row['coverage']} "
            f"| {row['most_sent']:,} ({row['most_sent'] / row['window']:.0%}) "
            f"| {row['render_s'] * 1000:.0f} ms | {row['fit_s'] * 1000:.0f} ms | {row['count_s'] * 1000:.0f} ms |"
        )


def run_cases(document: dict, sizes: list[float], windows: list[int], runs: int) -> list[dict]:
    from django.conf import settings

    from scoring import services
    from scoring.judge import conversation, fitting, injection, tokens
    from scoring.judge.rendering import render_investigation, render_investigation_parts
    from tests.support.fake_llm import ContextWindow, FakeLLMServer, Reply
    from tests.support.long_sessions import log_lines, session_of, with_long_observations, with_long_tool_output

    react = json.loads((REPO / "scoring" / "samples" / "02_multi_stage_chain.json").read_text(encoding="utf-8"))
    shapes = (("tool result", lambda size: with_long_tool_output(document, size)),
              ("ReAct", lambda size: with_long_observations(react, size)))  # fmt: skip

    server = FakeLLMServer().start()
    env = server.env()
    settings.SCORING_LLM_MODEL = env["SCORING_LLM_MODEL"]
    settings.SCORING_LLM_API_BASE = env["SCORING_LLM_API_BASE"]
    settings.SCORING_LLM_API_KEY = env["SCORING_LLM_API_KEY"]
    settings.SCORING_LLM_TIMEOUT_S = 120
    # The first count of a long text in a process takes about a second more than the next ones
    # (the tokenizer loading and warming up): paid once per worker, left out of the figures.
    tokens.litellm_count(log_lines(1_000_000))
    rows = []
    try:
        for shape, size in ((shape, size) for shape in shapes for size in sizes):
            long_document = shape[1](int(size * 1_000_000))
            session = session_of(long_document)
            render_s = median_s(lambda: render_investigation(session), runs)
            rendered = render_investigation(session)
            # Each run's text differs, as each scoring's would: litellm's counts are kept for the last few texts.
            count_s = median_s(lambda: tokens.litellm_count(rendered + str(uuid.uuid4())), runs)
            for window in windows:

                def render_and_fit(window=window):
                    token = injection.new_boundary_token()

                    def build(text: str) -> str:
                        return conversation.build_score_prompt(session, boundary_token=token, investigation=text)

                    return fitting.fit_prompt(render_investigation_parts(session), build, window)

                fit_s = median_s(render_and_fit, runs)
                settings.SCORING_LLM_CONTEXT_TOKENS = window
                fitting.forget_learned_windows()
                judge = ContextWindow(window, Reply(TURN1))
                server.reset(judge)
                copy = long_document | {"session_id": str(uuid.uuid4())}
                stored, _ = services.ingest_session(copy, written_by="bench")
                services.score_request(session_id=stored.session_id, triggered_by="bench")
                score = services.run_claimed_score(services.claim_pending_scores(1)[0])
                rows.append(
                    {
                        "shape": shape[0],
                        "size": size,
                        "window": window,
                        "completed": "yes" if score.status == "completed" else f"no: {score.error_message}",
                        "coverage": "-" if score.input_coverage is None else f"{score.input_coverage:.4f}",
                        "most_sent": max(judge.received, default=0),
                        "render_s": render_s,
                        "count_s": count_s,
                        "fit_s": fit_s,
                    }
                )
                print(rows[-1], file=sys.stderr, flush=True)
    finally:
        server.stop()
    return rows


def median_s(function, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


if __name__ == "__main__":
    main()
