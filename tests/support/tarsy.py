"""A stand-in TARSy for the sync tests: tarsy-bot's history API on loopback.

It serves real tarsy-bot session documents (``../shared/data/tarsy-bot/``,
beside the repository) as ``GET /api/v1/history/sessions/{id}``, and builds
``GET /api/v1/history/sessions`` from them the way tarsy-bot does
(``HistoryRepository.get_alert_sessions``: ``SessionOverview`` items,
``PaginationInfo``, ``filters_applied``; repeated ``status=`` values, page_size
1-100, unsupported sort fields fall back to ``started_at_us`` descending).
It can be told to answer 401/403/5xx or drop connections, and counts requests.

    def test_x(tarsy):
        tarsy.fail_next(503, times=2)
        call_command("sync_sessions", tarsy.url)
        assert tarsy.detail_fetches() == {...}
"""

from __future__ import annotations

import copy
import io
import json
import os
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.management import CommandError, call_command

from tests.support.servers import REPO_DIR, StandInControls, StandInHTTPServer
from tests.support.tls import ServerCertificate

REAL_DOCUMENTS_DIR = REPO_DIR.parent / "shared" / "data" / "tarsy-bot"
LIST_PATH = "/api/v1/history/sessions"
# Where a 3xx answer points, as oauth2-proxy points at its sign-in.
LOGIN_URL = "https://login.example.com/oauth2/start"
SORT_FIELDS = ("started_at_us", "status", "alert_type", "agent_type", "author", "completed_at_us")


def real_documents() -> list[dict]:
    """The real documents; without their folder, a failure in CI and a skip elsewhere."""
    files = sorted(REAL_DOCUMENTS_DIR.glob("*.json"))
    if not files:
        reason = f"the real tarsy-bot documents are missing: none in {REAL_DOCUMENTS_DIR}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return [json.loads(file.read_text(encoding="utf-8")) for file in files]


def _all_stages(stages):
    for stage in stages if isinstance(stages, list) else []:
        yield stage
        yield from _all_stages(stage.get("parallel_executions"))


def session_overview(document: dict) -> dict:
    """tarsy-bot's ``SessionOverview`` of a session, in its field order.

    The counts and token sums are what tarsy-bot's repository computes from its
    tables; here they come from the document (the same rows): a chat's user
    messages are its stages' ``chat_user_message_id`` values, and the count is
    null when there are none. total_stages, completed_stages and failed_stages
    are the constants the repository sets.
    """
    stages = list(_all_stages(document.get("stages")))
    chat_messages = {stage["chat_user_message_id"] for stage in stages if stage.get("chat_user_message_id")}
    started, completed = document["started_at_us"], document.get("completed_at_us")
    return {
        "session_id": document["session_id"],
        "alert_type": document.get("alert_type"),
        "agent_type": document["agent_type"],
        "status": document["status"],
        "author": document.get("author"),
        "started_at_us": started,
        "completed_at_us": completed,
        "error_message": document.get("error_message"),
        "pause_metadata": document.get("pause_metadata"),
        "llm_interaction_count": document.get("llm_interaction_count", 0),
        "mcp_communication_count": document.get("mcp_communication_count", 0),
        "total_interactions": document.get("llm_interaction_count", 0)
        + document.get("mcp_communication_count", 0),
        "session_input_tokens": document.get("session_input_tokens"),
        "session_output_tokens": document.get("session_output_tokens"),
        "session_total_tokens": document.get("session_total_tokens"),
        "chain_id": document["chain_id"],
        "total_stages": None,
        "completed_stages": None,
        "failed_stages": 0,
        "current_stage_index": document.get("current_stage_index"),
        "has_parallel_stages": any(
            stage.get("parallel_type", "single") != "single" or stage.get("parent_stage_execution_id")
            for stage in stages
        ),
        "mcp_selection": document.get("mcp_selection"),
        "slack_message_fingerprint": document.get("slack_message_fingerprint"),
        "chat_message_count": len(chat_messages) or None,
        "final_analysis_summary": document.get("final_analysis_summary"),
        "duration_ms": (completed - started) // 1000 if started and completed else None,
    }


class StandInTarsy(StandInControls):
    def __init__(self, documents: list[dict], tls: ServerCertificate | None = None):
        self.documents = {document["session_id"]: document for document in documents}
        self.requests: list[tuple[str, dict]] = []
        self.required_headers: dict[str, str] = {}
        self.detail_delay_s = 0.0
        # path -> (status, content type, body): answered as it is, whatever the path.
        self.raw_answers: dict[str, tuple[int, str, bytes]] = {}
        # Each request's headers, in order (what the client sent).
        self.request_headers: list[dict[str, str]] = []
        self._failures: list[int | str | None] = []
        self._lock = threading.Lock()
        self._server = StandInHTTPServer(("127.0.0.1", 0), self._handler_class())
        scheme = "http"
        if tls is not None:
            self._server.socket = tls.server_context().wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    # --- Telling it what to do ------------------------------------------------------------

    def add(self, document: dict) -> None:
        self.documents[document["session_id"]] = document

    def add_chat_message(self, session_id: str) -> None:
        """What a follow-up chat message does to a finished session: a stage answering it
        (so the list entry's chat_message_count grows), status and completion unchanged."""
        document = copy.deepcopy(self.documents[session_id])
        message_id = str(uuid.uuid4())
        stage = {
            **copy.deepcopy(document["stages"][-1]),
            "execution_id": str(uuid.uuid4()),
            "stage_index": 0,
            "chat_id": f"chat-{session_id}",
            "chat_user_message_id": message_id,
        }
        document["stages"].append(stage)
        self.documents[session_id] = document

    # --- What it saw ------------------------------------------------------------------------

    def detail_fetches(self) -> Counter:
        return Counter(
            path.rsplit("/", 1)[1] for path, _ in self.requests if path.startswith(LIST_PATH + "/")
        )

    def list_requests(self) -> list[dict]:
        return [query for path, query in self.requests if path == LIST_PATH]

    # --- Answers ------------------------------------------------------------------------------

    def list_page(self, query: dict[str, list[str]]) -> tuple[int, dict]:
        try:
            page = int(query.get("page", ["1"])[0])
            page_size = int(query.get("page_size", ["20"])[0])
        except ValueError:
            return 422, {"detail": "page and page_size must be integers"}
        if page < 1 or not 1 <= page_size <= 100:
            return 422, {"detail": [{"loc": ["query", "page_size"], "msg": "1 <= page_size <= 100"}]}
        statuses = query.get("status")
        start = int(query["start_date_us"][0]) if "start_date_us" in query else None
        sessions = [
            document
            for document in self.documents.values()
            if (not statuses or document["status"] in statuses)
            and (start is None or document["started_at_us"] >= start)
        ]
        sort_by = query.get("sort_by", [None])[0]
        key = sort_by if sort_by in SORT_FIELDS else "started_at_us"
        order = query.get("sort_order", ["desc"])[0].lower() if sort_by in SORT_FIELDS else "desc"
        sessions.sort(key=lambda d: (d.get(key) is not None, d.get(key) or 0), reverse=order != "asc")
        total = len(sessions)
        chosen = sessions[(page - 1) * page_size : page * page_size]
        filters = {"status": statuses} if statuses else {}
        if start is not None:
            filters["start_date_us"] = start
        if not filters:  # the repository's own dict, when the controller had no filters to put in
            filters = {
                k: None
                for k in ("status", "agent_type", "alert_type", "search", "start_date_us", "end_date_us")
            }
        return 200, {
            "sessions": [session_overview(document) for document in chosen],
            "pagination": {
                "page": page,
                "page_size": page_size,
                "total_pages": (total + page_size - 1) // page_size,
                "total_items": total,
            },
            "filters_applied": filters,
        }

    def _handler_class(self):
        tarsy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                with tarsy._lock:
                    tarsy.requests.append((parts.path, query))
                    tarsy.request_headers.append(dict(self.headers))
                    failure = tarsy.next_failure()
                if failure == "drop":
                    self.close_connection = True
                    return
                if failure is not None:
                    headers = {"Location": LOGIN_URL} if 300 <= failure < 400 else {}
                    return self._send(
                        failure, {"detail": f"stand-in TARSy told to answer {failure}"}, headers
                    )
                for name, value in tarsy.required_headers.items():
                    if self.headers.get(name) != value:
                        return self._send(401, {"detail": "Not authenticated"})
                if parts.path in tarsy.raw_answers:
                    status, content_type, body = tarsy.raw_answers[parts.path]
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if parts.path == LIST_PATH:
                    return self._send(*tarsy.list_page(query))
                if parts.path.startswith(LIST_PATH + "/"):
                    time.sleep(tarsy.detail_delay_s)
                    session_id = parts.path.rsplit("/", 1)[1]
                    document = tarsy.documents.get(session_id)
                    if document is None:
                        return self._send(404, {"detail": f"Session {session_id} not found"})
                    return self._send(200, document)
                return self._send(404, {"detail": "Not Found"})

            def _send(self, status: int, body, headers: dict[str, str] | None = None):
                data = json.dumps(body).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def sync(*args: str) -> tuple[str, str, str | None]:
    """Run ``manage.py sync_sessions``; return its stdout, its stderr and its CommandError (None
    if it succeeded)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        call_command("sync_sessions", *args, stdout=stdout, stderr=stderr)
    except CommandError as exc:
        return stdout.getvalue(), stderr.getvalue(), str(exc)
    return stdout.getvalue(), stderr.getvalue(), None


def new_session(template: dict, started_at_us: int) -> dict:
    """A copy of a real document as another, later session."""
    document = copy.deepcopy(template)
    document["session_id"] = str(uuid.uuid4())
    duration = (document.get("completed_at_us") or started_at_us) - document["started_at_us"]
    document["started_at_us"] = started_at_us
    document["completed_at_us"] = started_at_us + max(duration, 0)
    return document


@pytest.fixture
def tarsy():
    server = StandInTarsy(real_documents())
    yield server
    server.stop()
