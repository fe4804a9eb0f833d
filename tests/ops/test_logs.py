"""Structured logs: LOG_FORMAT=json lines, and the log_context fields on every record."""

import asyncio
import io
import json
import logging
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

from scoring.ops.logs import ContextFilter, JsonFormatter, PlainFormatter, log_context
from tests.support.servers import REPO_DIR


@pytest.fixture
def capture():
    """A logger whose records go through ContextFilter to ``capture(formatter)``'s stream."""
    handlers = []
    logger = logging.getLogger("tests.logs")
    logger.setLevel(logging.DEBUG)

    def attach(formatter: logging.Formatter) -> io.StringIO:
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(formatter)
        handler.addFilter(ContextFilter())
        logger.addHandler(handler)
        handlers.append(handler)
        return stream

    yield logger, attach
    for handler in handlers:
        logger.removeHandler(handler)


def json_lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_the_context_and_the_call_extras(capture):
    logger, attach = capture
    stream = attach(JsonFormatter())
    score_id, session_id = uuid.uuid4(), uuid.uuid4()

    with log_context(score_id=score_id):
        with log_context(session_id=session_id):
            logger.info("turn %d answered", 1, extra={"tokens": 1200})
        logger.warning("between turns")
    logger.info("outside")

    inner, middle, outside = json_lines(stream)
    assert inner["message"] == "turn 1 answered"
    assert inner["level"] == "INFO"
    assert inner["logger"] == "tests.logs"
    assert inner["timestamp"].endswith("+00:00")
    assert inner["score_id"] == str(score_id)
    assert inner["session_id"] == str(session_id)
    assert inner["tokens"] == 1200
    assert middle["score_id"] == str(score_id) and "session_id" not in middle
    assert "score_id" not in outside


def test_json_line_of_an_exception_holds_the_traceback_on_one_line(capture):
    logger, attach = capture
    stream = attach(JsonFormatter())

    try:
        raise ValueError("bad reply")
    except ValueError:
        logger.exception("judge job failed")

    assert len(stream.getvalue().splitlines()) == 1
    (entry,) = json_lines(stream)
    assert entry["level"] == "ERROR"
    assert "ValueError: bad reply" in entry["exception"]


def test_plain_lines_end_with_the_context(capture):
    logger, attach = capture
    stream = attach(PlainFormatter())

    with log_context(score_id="s-1", session_id="sess-1"):
        logger.info("claimed")
    logger.info("no context")

    first, second = stream.getvalue().splitlines()
    assert first.endswith("INFO tests.logs claimed [score_id=s-1 session_id=sess-1]")
    assert second.endswith("INFO tests.logs no context")


def test_plain_lines_escape_line_breaks_and_control_characters_of_untrusted_text(capture):
    """A judge's reply (which a session can steer) cannot forge a record of its own."""
    logger, attach = capture
    stream = attach(PlainFormatter())
    reply = "fine\n2026-01-01 10:00:00,000 ERROR scoring.services forged\r\x1b[2K\u2028end"

    with log_context(session_id="s\n1"):
        logger.debug("judge replied: %s", reply)
        logger.info("a literal\nmessage")

    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith(
        "DEBUG tests.logs judge replied: fine\\n2026-01-01 10:00:00,000 ERROR scoring.services forged"
        "\\r\\x1b[2K\\u2028end [session_id=s\\n1]"
    )
    assert lines[1].endswith("INFO tests.logs a literal\\nmessage [session_id=s\\n1]")


def test_json_lines_keep_untrusted_text_whole_on_one_line(capture):
    logger, attach = capture
    stream = attach(JsonFormatter())

    logger.debug("judge replied: %s", "fine\nforged\u2028line\x85end")

    (entry,) = json_lines(stream)  # one line, also for readers that break lines at U+2028 or NEL
    assert entry["message"] == "judge replied: fine\nforged\u2028line\x85end"


def test_concurrent_tasks_keep_their_own_context(capture):
    logger, attach = capture
    stream = attach(JsonFormatter())

    async def job(score_id: str):
        with log_context(score_id=score_id):
            await asyncio.sleep(0)  # let the other job run in between
            logger.info("working")

    async def both():
        await asyncio.gather(job("a"), job("b"))

    asyncio.run(both())

    assert sorted(entry["score_id"] for entry in json_lines(stream)) == ["a", "b"]


def run_django(code: str, **env: str) -> subprocess.CompletedProcess:
    child_env = {key: value for key, value in os.environ.items() if key not in {"LOG_FORMAT", "LOG_LEVEL"}}
    child_env.update(DJANGO_SETTINGS_MODULE="tarsy_scoring.settings", **env)
    program = "import django; django.setup()\n" + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", program],
        check=False,
        cwd=REPO_DIR,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_log_format_json_configures_the_service_logs(tmp_path):
    process = run_django(
        """
        import logging
        from scoring.ops.logs import log_context
        with log_context(score_id="score-7", session_id="session-7"):
            logging.getLogger("scoring.services").info("judge job started")
        """,
        LOG_FORMAT="json",
        TARSY_SCORING_VAR_DIR=str(tmp_path),
    )

    assert process.returncode == 0, process.stderr
    (entry,) = [json.loads(line) for line in process.stderr.splitlines()]
    assert entry["logger"] == "scoring.services"
    assert entry["message"] == "judge job started"
    assert (entry["score_id"], entry["session_id"]) == ("score-7", "session-7")


def test_default_log_format_is_human_readable(tmp_path):
    process = run_django(
        """
        import logging
        from scoring.ops.logs import log_context
        with log_context(score_id="score-7"):
            logging.getLogger("scoring.services").info("judge job started")
        """,
        TARSY_SCORING_VAR_DIR=str(tmp_path),
    )

    assert process.returncode == 0, process.stderr
    assert process.stderr.rstrip().endswith("INFO scoring.services judge job started [score_id=score-7]")


def test_unknown_log_format_stops_startup(tmp_path):
    process = run_django("", LOG_FORMAT="xml", TARSY_SCORING_VAR_DIR=str(tmp_path))

    assert process.returncode != 0
    assert "LOG_FORMAT='xml' is not a log format (use text or json)" in process.stderr
