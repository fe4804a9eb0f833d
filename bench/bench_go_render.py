"""Rendering a session with a long tool output for the judge: a Go TARSy session beside a
tarsy-bot one, in the same run.

Run from the repository root:  .venv/bin/python bench/bench_go_render.py
Go: the e2e golden "pipeline" session (``tests/support/tarsy_go.py``) whose ``get_pod_logs``
call returned --sizes-mb of log lines (``tests/support/long_sessions.log_lines``), stored as Go
TARSy stores it: cut to 32 KB with its marker in the timeline event and the MCP interaction
(``TruncateForStorage``), whole in the tool message of each later LLM call's conversation (the
agent saw it whole), so the judge is given the whole result from there. tarsy-bot: the real
session of ``bench_long_sessions.py`` (``../shared/data/tarsy-bot/``) with its ``get_logs``
result grown to the same size. Per session, median (min-max) of --runs: the rendering
(``render_investigation``), the turn-1 prompt built around the whole rendered text
(``conversation.build_score_prompt``), and rendering and fitting to a 128k-token window
(``fitting.fit_prompt``, what a scoring against such a judge does). See docs/performance.md.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import machine_description, setup_django, sqlite_url, work_folder  # noqa: E402

BOT_DOCUMENTS = REPO.parent / "shared" / "data" / "tarsy-bot"
BOT_DOCUMENT = "parallel_multi_agent"
GO_SCENARIO = "pipeline"
GO_TOOL = "get_pod_logs"
WINDOW = 128_000
MB = 1_000_000


def storage_cut(text: str) -> str:
    """Go TARSy's TruncateForStorage (pkg/mcp/tokens.go): 32,000 bytes kept up to a line break,
    and its marker."""
    kept = text[:32_000].rsplit("\n", 1)[0]
    return (
        f"{kept}\n\n[TRUNCATED: Output exceeded storage display limit — "
        f"Original size: {len(text) // 1024}KB, limit: 31KB]"
    )


def go_document(size_chars: int) -> dict:
    """The golden Go session with its ``GO_TOOL`` result ``size_chars`` long, stored as Go stores it."""
    from tests.support.long_sessions import log_lines
    from tests.support.tarsy_go import golden_document

    document = golden_document(GO_SCENARIO)
    (call_id,) = [i for i, d in document["mcp_interactions"].items() if d.get("tool_name") == GO_TOOL]
    detail = document["mcp_interactions"][call_id]
    own = detail["tool_result"]["content"]
    whole = own + "\n" + log_lines(size_chars - len(own) - 1)
    detail["tool_result"]["content"] = storage_cut(whole)
    events = [
        e for e in document["timeline"]
        if e["event_type"] == "llm_tool_call" and e["metadata"].get("tool_name") == GO_TOOL
    ]  # fmt: skip
    (event,) = events
    event["content"] = storage_cut(whole)
    messages = [
        message
        for detail in document["llm_interactions"].values()
        for message in detail.get("conversation") or []
        if message["role"] == "tool" and message.get("tool_name", "").endswith(GO_TOOL)
    ]
    assert messages, f"no conversation holds the {GO_TOOL} result"
    for message in messages:
        message["content"] = whole
    return document


def bot_document(size_chars: int) -> dict:
    from tests.support.long_sessions import with_long_tool_output

    (path,) = [p for p in sorted(BOT_DOCUMENTS.glob("*.json")) if p.name.startswith(BOT_DOCUMENT)]
    return with_long_tool_output(json.loads(path.read_text(encoding="utf-8")), size_chars)


def timed(function, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return times


def measure(session, runs: int) -> dict:
    from scoring.judge import conversation, fitting, injection
    from scoring.judge.rendering import render_investigation, render_investigation_parts

    token = injection.new_boundary_token()
    rendered = render_investigation(session)

    def build(text: str) -> str:
        return conversation.build_score_prompt(session, boundary_token=token, investigation=text)

    return {
        "render": timed(lambda: render_investigation(session), runs),
        "prompt": timed(lambda: build(rendered), runs),
        "fit": timed(lambda: fitting.fit_prompt(render_investigation_parts(session), build, WINDOW), runs),
        "rendered_mb": len(rendered.encode()) / MB,
    }


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ({min(values) * 1000:.0f}-{max(values) * 1000:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="20", help="tool output sizes, MB (comma-separated)")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    machine = machine_description()
    with work_folder() as folder:
        setup_django(sqlite_url(folder))  # nothing is stored but what counting learns
        from django.core.management import call_command

        from scoring.judge import tokens
        from tests.support.long_sessions import log_lines, session_of
        from tests.support.tarsy_go_builder import alert_session

        # The tokenizer's first long count in a process is a second slower: paid once, left out.
        call_command("migrate", verbosity=0)
        tokens.litellm_count(log_lines(1_000_000))
        rows = []
        for size in (float(s) for s in args.sizes_mb.split(",")):
            for source, make, session_from in (
                ("Go TARSy", go_document, alert_session),
                ("tarsy-bot", bot_document, session_of),
            ):
                document = make(int(size * MB))
                row = measure(session_from(document), args.runs)
                json_mb = len(json.dumps(document)) / MB
                rows.append({"size": size, "source": source, "json_mb": json_mb, **row})
                print(f"{source} {size:g} MB: done", file=sys.stderr, flush=True)
    print(machine)
    print(f"\nMedian (min-max) of {args.runs} runs, ms. Fitting: to a {WINDOW:,}-token window.\n")
    print("| tool output | session | document JSON | rendered | render | prompt build | render + fit |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['size']:g} MB | {row['source']} | {row['json_mb']:.1f} MB | {row['rendered_mb']:.1f} MB "
            f"| {ms(row['render'])} | {ms(row['prompt'])} | {ms(row['fit'])} |"
        )


if __name__ == "__main__":
    main()
