"""A stand-in Go TARSy on loopback: its session API, answering as Go TARSy answers.

It serves "tarsy-go/1" documents (default: the e2e golden sessions, tests/support/tarsy_go.py)
the way Go TARSy's handlers (pkg/api) serve the rows they come from:

    GET /api/v1/sessions                      DashboardListResponse (handler_session.go and
                                              SessionService.ListSessionsForDashboard: its query
                                              parameters, validation, filters, sorting, pages)
    GET /api/v1/sessions/active               ActiveSessionsResponse (GetActiveSessions)
    GET /api/v1/sessions/:id                  the document's "session"
    GET /api/v1/sessions/:id/timeline         "timeline" ([] for an unknown session, as Go)
    GET /api/v1/sessions/:id/trace            "trace" (empty lists for an unknown session)
    GET /api/v1/sessions/:id/trace/llm/:iid   "llm_interactions"[iid] (Go looks the id up alone)
    GET /api/v1/sessions/:id/trace/mcp/:iid   "mcp_interactions"[iid]
    GET /api/v1/sessions/:id/score            "score", or 404 when it is null
    GET /api/v1/sessions/:id/review-activity  "review_activity" ({"activities": []} if absent)
    GET /health                               HealthResponse
    GET /api/v1/ws                            its WebSocket, when ``events`` is set: the upgrade and
                                              the frames after it relayed to that stand-in
                                              (tests/support/fake_tarsy_go_events.py); else 404

Bodies are encoding/json's (compact, HTML-escaped, a newline after), errors echo's
``{"message": ...}`` (``resource not found`` from the services, ``Not Found`` for an unknown
route). Go TARSy itself has no authentication (oauth2-proxy or kube-rbac-proxy guard /api/* in
front of it); with ``token`` set, /api/* wants ``Authorization: Bearer <token>`` and answers 401
with echo's body for ``echo.ErrUnauthorized`` otherwise. It can serve TLS, answer slowly, fail
the next requests or drop connections, and counts requests per path and the most it was
answering at once (from a request's arrival until its answer goes out).

Where PostgreSQL decides (ties in sorting, collation, full-text search), it approximates: ties
keep the order the sessions were added in, strings compare by code point, and the search
matches a timeline event whose words include every word searched (no stemming, no stop words).

    def test_x(tarsy_go):
        tarsy_go.fail_next(503, times=2)
        ...
        assert tarsy_go.request_counts()["/api/v1/sessions"] == 3
"""

from __future__ import annotations

import copy
import datetime as dt
import re
import socket
import ssl
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.fake_tarsy_go_events import WS_PATH, StandInGoTarsyEvents
from tests.support.servers import StandInControls, StandInHTTPServer
from tests.support.tarsy_go import (
    DASHBOARD_ITEM,
    DASHBOARD_LIST,
    PAGINATION,
    SESSION_SCENARIOS,
    go_json,
    golden_document,
    parse_go_time,
    session_executions,
)

API = "/api/v1"
SESSIONS_PATH = API + "/sessions"
SESSION_STATUSES = ("pending", "in_progress", "cancelling", "completed", "failed", "cancelled", "timed_out")
REVIEW_STATUSES = ("needs_review", "in_progress", "reviewed")
QUALITY_RATINGS = ("accurate", "partially_accurate", "inaccurate")
SORT_FIELDS = ("created_at", "status", "alert_type", "author", "duration", "score", "quality_rating")
SCORING_STATUSES = ("scored", "not_scored", "scoring_in_progress", "scoring_failed")
DEFAULT_PAGE_SIZE = 25
MAX_PAGE_SIZE = 100
NOT_FOUND = {"message": "resource not found"}  # mapServiceError(services.ErrNotFound)
# pkg/api/middleware.go securityHeaders.
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "strict-origin-when-cross-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}
INTEGER_RE = re.compile(r"[+-]?[0-9]+")  # what strconv.Atoi accepts
SESSION_ROUTE_RE = re.compile(
    r"/api/v1/sessions/(?P<id>[^/]+)(?:/(?P<what>timeline|trace|score|review-activity)"
    r"|/trace/(?P<kind>llm|mcp)/(?P<iid>[^/]+))?"
)
WORD_RE = re.compile(r"[0-9a-z]+")


class BadRequest(Exception):
    pass


def _times(document: dict) -> dict:
    session = document["session"]
    return {key: parse_go_time(session[key]) if session.get(key) else None
            for key in ("created_at", "started_at", "completed_at")}


def _words(text: str) -> set[str]:
    return set(WORD_RE.findall(text.lower()))


def matched_in_content(document: dict, search: str) -> bool:
    """A timeline event matches ``to_tsvector('english', content) @@ plainto_tsquery(search)``
    (approximated: every searched word is a word of the event)."""
    wanted = _words(search)
    events = document.get("timeline") or []
    return bool(wanted) and any(wanted <= _words(e.get("content", "")) for e in events)


def dashboard_item(document: dict, search: str = "", cost_estimation_enabled: bool = True) -> dict:
    """The session's DashboardSessionItem: its columns and the aggregates Go's list query
    computes, here from the document (the same rows)."""
    session = document["session"]
    times = _times(document)
    duration = None
    if times["started_at"] and times["completed_at"]:
        duration = (times["completed_at"] - times["started_at"]) // dt.timedelta(milliseconds=1)
    score = document.get("score")
    latest_score = score["total_score"] if score and score.get("status") == "completed" else None
    values = {
        "id": session["id"],
        "alert_type": session["alert_type"],
        "chain_id": session["chain_id"],
        "status": session["status"],
        "author": session["author"],
        "created_at": session["created_at"],
        "started_at": session["started_at"],
        "completed_at": session["completed_at"],
        "duration_ms": duration,
        "error_message": session["error_message"],
        "executive_summary": session["executive_summary"],
        "llm_interaction_count": session["llm_interaction_count"],
        "mcp_interaction_count": session["mcp_interaction_count"],
        "input_tokens": session["input_tokens"],
        "output_tokens": session["output_tokens"],
        "total_tokens": session["total_tokens"],
        "total_stages": session["total_stages"],
        "completed_stages": session["completed_stages"],
        "has_parallel_stages": session["has_parallel_stages"],
        "has_sub_agents": any(e.get("parent_execution_id") for _, e in session_executions(session)),
        "has_action_stages": session["has_action_stages"],
        "actions_executed": session["actions_executed"],
        "chat_message_count": session["chat_message_count"],
        "provider_fallback_count": sum(
            1 for e in document.get("timeline") or [] if e.get("event_type") == "provider_fallback"
        ),
        "current_stage_index": session["current_stage_index"],
        "current_stage_id": session["current_stage_id"],
        "matched_in_content": bool(search) and matched_in_content(document, search),
        "latest_score": latest_score if latest_score is not None else session.get("latest_score"),
        "scoring_status": score["status"] if score else session.get("scoring_status"),
        "review_status": session["review_status"],
        "assignee": session["assignee"],
        "quality_rating": session["quality_rating"],
        "action_taken": session["action_taken"],
        "investigation_feedback": session["investigation_feedback"],
        "feedback_edited": session["feedback_edited"],
        "feedback_edited_by": session["feedback_edited_by"],
        "feedback_edited_at": session["feedback_edited_at"],
    }
    if cost_estimation_enabled:
        values["estimated_cost_usd"] = session.get("estimated_cost_usd") or 0
        values["cost_completeness"] = session.get("cost_completeness", "none")
    return DASHBOARD_ITEM.build(values)


def _first(query: dict[str, list[str]], name: str) -> str:
    return query.get(name, [""])[0]  # echo's c.QueryParam: the first value, "" when absent


def _date(query: dict, name: str) -> dt.datetime | None:
    value = _first(query, name)
    if not value:
        return None
    try:
        return parse_go_time(value)
    except ValueError:
        raise BadRequest(f"invalid {name}: must be RFC3339") from None


def list_sessions(
    documents: list[dict], query: dict[str, list[str]], cost_estimation_enabled: bool = True
) -> dict:
    """GET /api/v1/sessions: listSessionsHandler's parsing, then ListSessionsForDashboard."""
    page, page_size, sort_by, sort_order = 1, DEFAULT_PAGE_SIZE, "created_at", "desc"
    value = _first(query, "page")
    if INTEGER_RE.fullmatch(value) and int(value) > 0:
        page = int(value)
    value = _first(query, "page_size")
    if INTEGER_RE.fullmatch(value) and 0 < int(value) <= MAX_PAGE_SIZE:
        page_size = int(value)
    if value := _first(query, "sort_by"):
        if value not in SORT_FIELDS:
            raise BadRequest(
                "invalid sort_by: must be created_at, status, alert_type, author, duration, score,"
                " or quality_rating"
            )
        sort_by = value
    if value := _first(query, "sort_order"):
        if value not in ("asc", "desc"):
            raise BadRequest("invalid sort_order: must be asc or desc")
        sort_order = value
    statuses = None
    if value := _first(query, "status"):
        statuses = value.split(",")
        for status in statuses:
            if status not in SESSION_STATUSES:
                raise BadRequest("invalid status: " + status)
    alert_type, chain_id = _first(query, "alert_type"), _first(query, "chain_id")
    scoring_status = _first(query, "scoring_status")
    if scoring_status and scoring_status not in SCORING_STATUSES:
        raise BadRequest(
            "invalid scoring_status: must be scored, not_scored, scoring_in_progress, or scoring_failed"
        )
    search = _first(query, "search")
    if search and len(search.encode()) < 3:
        raise BadRequest("search query must be at least 3 characters")
    start, end = _date(query, "start_date"), _date(query, "end_date")
    review_statuses = None
    if value := _first(query, "review_status"):
        review_statuses = value.split(",")
        for status in review_statuses:
            if status not in REVIEW_STATUSES:
                raise BadRequest("invalid review_status: " + status)
    assignee = _first(query, "assignee")
    quality_rating = _first(query, "quality_rating")
    if quality_rating and quality_rating not in QUALITY_RATINGS:
        raise BadRequest("invalid quality_rating: " + quality_rating)

    def latest_status(document):
        return (document.get("score") or {}).get("status")

    def kept(document: dict) -> bool:
        session = document["session"]
        created = _times(document)["created_at"]
        scored = latest_status(document)
        scoring_ok = {
            "": True,
            "scored": scored == "completed",
            "not_scored": document.get("score") is None,
            "scoring_in_progress": scored in ("pending", "in_progress"),
            "scoring_failed": scored in ("failed", "timed_out", "cancelled"),
        }[scoring_status]
        text_hit = search.casefold() in session["alert_data"].casefold() or search.casefold() in (
            session["final_analysis"] or ""
        ).casefold()
        return (
            (statuses is None or session["status"] in statuses)
            and (not alert_type or (session["alert_type"] or "") == alert_type)
            and (not chain_id or session["chain_id"] == chain_id)
            and (not search or text_hit or matched_in_content(document, search))
            and (start is None or created >= start)
            and (end is None or created < end)
            and scoring_ok
            and (review_statuses is None or session["review_status"] in review_statuses)
            and (not assignee or session["assignee"] == assignee)
            and (not quality_rating or session["quality_rating"] == quality_rating)
        )

    chosen = [document for document in documents if kept(document)]
    descending = sort_order == "desc"
    if sort_by in ("duration", "score"):
        # Computed sorts: NULLS LAST in both directions.
        def measure(document):
            if sort_by == "score":
                score = document.get("score")
                return score["total_score"] if score and score.get("status") == "completed" else None
            times = _times(document)
            if times["started_at"] and times["completed_at"]:
                return times["completed_at"] - times["started_at"]
            return None

        present = [d for d in chosen if measure(d) is not None]
        chosen = sorted(present, key=measure, reverse=descending) + [d for d in chosen if measure(d) is None]
    else:
        # Column sorts: PostgreSQL puts NULLs last ascending, first descending.
        def column(document):
            if sort_by == "created_at":
                return _times(document)["created_at"]
            value = document["session"][sort_by]
            return "" if sort_by == "alert_type" and value is None else value

        present = [d for d in chosen if column(d) is not None]
        missing = [d for d in chosen if column(d) is None]
        ordered = sorted(present, key=column, reverse=descending)
        chosen = missing + ordered if descending else ordered + missing
    total = len(chosen)
    page_items = chosen[(page - 1) * page_size : page * page_size]
    return DASHBOARD_LIST.build(
        {
            "sessions": [dashboard_item(d, search, cost_estimation_enabled) for d in page_items],
            "pagination": PAGINATION.build(
                {
                    "page": page,
                    "page_size": page_size,
                    "total_pages": (total + page_size - 1) // page_size if total else 0,
                    "total_items": total,
                }
            ),
            "cost_estimation_enabled": cost_estimation_enabled,
        }
    )


def active_sessions(documents: list[dict]) -> dict:
    """GET /api/v1/sessions/active: SessionService.GetActiveSessions (ActiveSessionsResponse), the
    running and cancelling sessions by start, the pending ones by creation with their place."""

    def common(session: dict) -> dict:
        return {key: session.get(key) for key in ("id", "alert_type", "chain_id", "status", "author", "created_at")}

    sessions = [document["session"] for document in documents]
    running = [s for s in sessions if s["status"] in ("in_progress", "cancelling")]
    running.sort(key=lambda s: s.get("started_at") or "")
    pending = sorted((s for s in sessions if s["status"] == "pending"), key=lambda s: s["created_at"])
    return {
        "active": [
            {**common(s), "started_at": s.get("started_at"), "current_stage_index": s.get("current_stage_index"),
             "current_stage_id": s.get("current_stage_id")}
            for s in running
        ],
        "queued": [{**common(s), "queue_position": place} for place, s in enumerate(pending, start=1)],
    }  # fmt: skip


class StandInGoTarsy(StandInControls):
    def __init__(
        self,
        documents: list[dict] | None = None,
        token: str | None = None,
        certfile: str | Path | None = None,
        keyfile: str | Path | None = None,
        cost_estimation_enabled: bool = True,
    ):
        if documents is None:
            documents = [golden_document(scenario) for scenario in SESSION_SCENARIOS]
        self._lock = threading.Lock()
        self.documents: dict[str, dict] = {}
        for document in documents:
            self.add(document)
        self.token = token
        self.cost_estimation_enabled = cost_estimation_enabled
        self.delay_s = 0.0
        self.delay_paths: tuple[str, ...] = ()
        self.requests: list[tuple[str, dict]] = []
        # Go's WebSocket, served at this API's /api/v1/ws; None: that path answers 404.
        self.events: StandInGoTarsyEvents | None = None
        self.in_flight = 0
        self.peak_in_flight = 0
        # The seconds of every request, from its arrival until its answer goes out, added up.
        self.busy_s = 0.0
        self._failures: list[int | str | None] = []
        self._server = StandInHTTPServer(("127.0.0.1", 0), self._handler_class())
        scheme = "http"
        if certfile:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(certfile, keyfile)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_port}"
        # A short poll, so that stop() returns quickly.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    # --- Telling it what to do ------------------------------------------------------------

    def add(self, document: dict) -> None:
        """Add a session, or replace the one with its id (e.g. once it has a review)."""
        with self._lock:
            self.documents[document["session"]["id"]] = copy.deepcopy(document)

    def remove(self, session_id: str) -> None:
        with self._lock:
            del self.documents[session_id]

    def slow(self, seconds: float, *paths: str) -> None:
        """Wait ``seconds`` before answering (requests whose path starts with one of ``paths``;
        every request when none is given)."""
        self.delay_s, self.delay_paths = seconds, paths

    # --- What it saw ------------------------------------------------------------------------

    def request_counts(self) -> Counter:
        with self._lock:
            return Counter(path for path, _ in self.requests)

    def reset_counts(self) -> None:
        """Forget the requests seen, the peak in flight and the busy seconds (between runs)."""
        with self._lock:
            self.requests, self.peak_in_flight, self.busy_s = [], self.in_flight, 0.0

    def list_requests(self) -> list[dict]:
        with self._lock:
            return [query for path, query in self.requests if path == SESSIONS_PATH]

    # --- Answers ------------------------------------------------------------------------------

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, object]:
        if path == "/health":
            return 200, {"status": "healthy", "version": "dev", "checks": {
                "database": {"status": "healthy"}, "worker_pool": {"status": "healthy"}}}
        with self._lock:
            documents = list(self.documents.values())
            by_id = dict(self.documents)
        if path == SESSIONS_PATH:
            try:
                return 200, list_sessions(documents, query, self.cost_estimation_enabled)
            except BadRequest as error:
                return 400, {"message": str(error)}
        if path == SESSIONS_PATH + "/active":
            return 200, active_sessions(documents)
        route = SESSION_ROUTE_RE.fullmatch(path)
        if route is None:
            return 404, {"message": "Not Found"}
        document = by_id.get(route["id"])
        if route["kind"]:
            key = f"{route['kind']}_interactions"
            for candidate in documents:  # Go finds an interaction by its id alone
                if route["iid"] in candidate[key]:
                    return 200, candidate[key][route["iid"]]
            return 404, NOT_FOUND
        what = route["what"]
        if what is None or what == "review-activity":
            if document is None:
                return 404, NOT_FOUND
            if what is None:
                return 200, document["session"]
            return 200, document.get("review_activity") or {"activities": []}
        if what == "timeline":
            return 200, document["timeline"] if document else []
        if what == "trace":
            return 200, document["trace"] if document else {"stages": [], "session_interactions": []}
        score = document.get("score") if document else None
        return (200, score) if score is not None else (404, NOT_FOUND)

    def _handler_class(self):
        tarsy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            _started = None  # when the request being answered arrived

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._started = time.monotonic()
                with tarsy._lock:
                    tarsy.in_flight += 1
                    tarsy.peak_in_flight = max(tarsy.peak_in_flight, tarsy.in_flight)
                try:
                    self._get()
                finally:
                    self._answered()  # a dropped connection

            def _answered(self):
                # Before the answer goes out: once the client has it, its next request may come
                # in before this thread runs again, and would be counted beside this one.
                if self._started is not None:
                    with tarsy._lock:
                        tarsy.in_flight -= 1
                        tarsy.busy_s += time.monotonic() - self._started
                    self._started = None

            def _get(self):
                parts = urlsplit(self.path)
                query = parse_qs(parts.query, keep_blank_values=True)
                with tarsy._lock:
                    tarsy.requests.append((parts.path, query))
                    failure = tarsy.next_failure()
                if tarsy.delay_s and (not tarsy.delay_paths or parts.path.startswith(tarsy.delay_paths)):
                    time.sleep(tarsy.delay_s)
                if failure == "drop":
                    self.close_connection = True
                    return
                if failure is not None:
                    return self._send(failure, {"message": f"stand-in Go TARSy told to answer {failure}"})
                if tarsy.token is not None and parts.path.startswith(API + "/"):
                    if self.headers.get("Authorization") != f"Bearer {tarsy.token}":
                        return self._send(401, {"message": "Unauthorized"})
                if parts.path == WS_PATH and tarsy.events is not None:
                    return self._relay(tarsy.events)
                return self._send(*tarsy.answer(parts.path, query))

            def _relay(self, events: StandInGoTarsyEvents):
                """The upgrade request, then the bytes both ways, to and from the events stand-in."""
                self._answered()  # a connection kept open, not a request in flight
                self.close_connection = True
                head = [self.requestline] + [f"{name}: {value}" for name, value in self.headers.items()]
                with socket.create_connection(events.address) as upstream:
                    upstream.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
                    back = threading.Thread(target=_pipe, args=(upstream, self.connection), daemon=True)
                    back.start()
                    _pipe(self.connection, upstream)
                    back.join()

            def _not_allowed(self):
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                self._send(405, {"message": "Method Not Allowed"})

            do_POST = do_PATCH = do_PUT = do_DELETE = _not_allowed

            def _send(self, status: int, body):
                # echo's c.JSON: json.NewEncoder(w).Encode(body), which ends with a newline.
                data = (go_json(body) + "\n").encode()
                self._answered()
                self.send_response(status)
                for name, value in SECURITY_HEADERS.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _pipe(source: socket.socket, target: socket.socket) -> None:
    """Copy until either side ends, then end both (so that the other direction stops too)."""
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    for end in (source, target):
        try:
            end.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


@pytest.fixture
def tarsy_go():
    """A stand-in Go TARSy serving the golden sessions."""
    server = StandInGoTarsy()
    yield server
    server.stop()

