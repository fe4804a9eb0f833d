"""Benchmark: rendering a session for the judge, and building the judge prompt from it.

Run from the repository root:  .venv/bin/python bench/bench_render.py
Builds synthetic sessions of about 1, 10, 20 and 50 MB by repeating the stages of the
sample sessions (a ReAct stage, a parallel stage with synthesis, a stage with a 230 KB
log) and prints a Markdown table. See docs/performance.md.
"""

import copy
import json
import os
import statistics
import sys
import time
import tracemalloc
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tarsy_scoring.settings")

import django  # noqa: E402

django.setup()

from scoring.judge.prompts import JUDGE_PROMPT_SCORE, OUTPUT_SCHEMA_SCORE, fill_placeholders  # noqa: E402
from scoring.judge.rendering import render_alert_data, render_investigation  # noqa: E402
from scoring.models import AlertSession  # noqa: E402

SAMPLES = REPO / "scoring" / "samples"
TEMPLATE_SAMPLES = ["01_single_stage_react.json", "03_parallel_agents.json", "08_large_tool_output.json"]
TARGET_MB = [1, 10, 20, 50]
RUNS = 7
MB = 1024 * 1024
FIELDS = {f.name for f in AlertSession._meta.get_fields()}


def template_stages() -> tuple[dict, list[tuple[dict, int]]]:
    """The base session and each template stage with its JSON size."""
    docs = [json.loads((SAMPLES / name).read_text(encoding="utf-8")) for name in TEMPLATE_SAMPLES]
    stages = [(stage, len(json.dumps(stage))) for doc in docs for stage in doc["stages"]]
    return docs[0], stages


def build_session(base: dict, stages: list[tuple[dict, int]], target_bytes: int) -> tuple[AlertSession, int]:
    """A session of about ``target_bytes`` of JSON, made of copies of the template stages."""
    doc = copy.deepcopy(base)
    doc["stages"] = []
    size = len(json.dumps(base))
    index = 0
    while size < target_bytes:
        template, stage_size = stages[index % len(stages)]
        stage = copy.deepcopy(template)
        stage["stage_index"] = index
        stage["execution_id"] = str(uuid.UUID(int=index + 1))
        doc["stages"].append(stage)
        size += stage_size
        index += 1
    return AlertSession(**{f: doc[f] for f in FIELDS if f in doc}), size


def count_llm(stages) -> int:
    return sum(len(s["llm_interactions"]) + count_llm(s.get("parallel_executions") or []) for s in stages)


def timed(fn, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def measure(session: AlertSession, size: int) -> dict:
    render_times = timed(lambda: render_investigation(session), RUNS)
    rendered = render_investigation(session)
    values = {
        "SESSION_CONVERSATION": rendered,
        "ALERT_DATA": render_alert_data(session.alert_data),
        "OUTPUT_SCHEMA": OUTPUT_SCHEMA_SCORE,
    }
    prompt_times = timed(lambda: fill_placeholders(JUDGE_PROMPT_SCORE, values), RUNS)
    del rendered
    tracemalloc.start()
    tracemalloc.reset_peak()
    baseline = tracemalloc.get_traced_memory()[0]
    text = render_investigation(session)
    peak = tracemalloc.get_traced_memory()[1] - baseline
    tracemalloc.stop()
    return {
        "size_mb": size / MB,
        "stages": len(session.stages),
        "llm": count_llm(session.stages),
        "render": render_times,
        "prompt": prompt_times,
        "peak_ratio": peak / size,
        "render_mb": len(text.encode("utf-8")) / MB,
    }


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def main() -> None:
    base, stages = template_stages()
    print("| Session size | Stages | LLM interactions | Render median (min-max), ms | Render ms per MB "
          "| Prompt build median, ms | Peak extra memory (x session size) | Rendered size |")
    print("|---|---|---|---|---|---|---|---|")
    for target in TARGET_MB:
        session, size = build_session(base, stages, target * MB)
        r = measure(session, size)
        median = statistics.median(r["render"])
        print(
            f"| {r['size_mb']:.1f} MB | {r['stages']} | {r['llm']} "
            f"| {ms(median)} ({ms(min(r['render']))}-{ms(max(r['render']))}) | {ms(median / r['size_mb'])} "
            f"| {ms(statistics.median(r['prompt']))} | {r['peak_ratio']:.2f} | {r['render_mb']:.1f} MB |",
            flush=True,
        )


if __name__ == "__main__":
    main()
