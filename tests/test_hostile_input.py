"""Hostile requests get a clear 4xx in JSON, never a 5xx, and change nothing.

Oversized bodies are refused with 413 before any view reads them, on the WSGI
and the ASGI (web server's) paths; malformed bodies, ids and query values get
400/404 with a message. (Field-by-field validation of session documents is in
tests/api/test_sessions.py and tests/tarsy/test_ingest.py.)
"""

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from rest_framework.test import APIClient

from scoring.models import AlertSession, SessionScore
from tests.support.api import session_document
from tests.support.factories import make_session, proxy_client

pytestmark = pytest.mark.django_db
SESSIONS_URL = "/api/v1/sessions/"
LIMIT = 4096


def score_url(session_id) -> str:
    return f"/api/v1/scoring/sessions/{session_id}/score"


@pytest.fixture
def small_limit(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = LIMIT


def oversized_session() -> str:
    body = json.dumps(session_document(final_analysis="x" * (LIMIT * 2)))
    assert len(body) > LIMIT
    return body


def test_an_oversized_session_is_413_in_json_and_not_stored(small_limit):
    response = proxy_client().post(SESSIONS_URL, oversized_session(), content_type="application/json")

    assert response.status_code == 413
    assert response.json()["detail"] == (
        f"request body of {len(oversized_session())} bytes is larger than the limit of {LIMIT} bytes "
        "(MAX_REQUEST_BODY_BYTES)"
    )
    assert not AlertSession.objects.exists()


def test_a_session_within_the_limit_is_accepted(small_limit):
    body = json.dumps(session_document(stages=[], session_level_interactions=[]))
    assert len(body) <= LIMIT
    assert proxy_client().post(SESSIONS_URL, body, content_type="application/json").status_code == 201


def test_an_oversized_score_request_is_413(small_limit):
    session = make_session()
    body = json.dumps({"force_rescore": False, "padding": "x" * LIMIT})
    response = proxy_client().post(score_url(session.session_id), body, content_type="application/json")
    assert response.status_code == 413
    assert not SessionScore.objects.exists()


def test_the_limit_holds_on_the_asgi_path_too(small_limit):
    client = AsyncClient(headers={"X-Forwarded-User": "alice"})
    response = async_to_sync(client.post)(SESSIONS_URL, oversized_session(), content_type="application/json")
    assert response.status_code == 413
    assert json.loads(response.content)["detail"].startswith("request body of ")


def test_an_oversized_body_is_refused_before_authentication(small_limit):
    response = APIClient().post(SESSIONS_URL, oversized_session(), content_type="application/json")
    assert response.status_code == 413


def call_asgi(headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> tuple[list[dict], int]:
    """Run one POST through the service's ASGI application; return what it sent
    and how many body messages it asked for."""
    from tarsy_scoring.asgi import application

    asked = 0
    sent = []

    async def receive():
        nonlocal asked
        if asked < len(chunks):
            asked += 1
            return {"type": "http.request", "body": chunks[asked - 1], "more_body": asked < len(chunks)}
        await asyncio.Event().wait()  # nothing more: the client waits for the answer

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": SESSIONS_URL,
        "raw_path": SESSIONS_URL.encode(),
        "query_string": b"",
        "headers": [(b"host", b"localhost"), (b"x-forwarded-user", b"alice"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "scheme": "http",
    }
    async_to_sync(application)(scope, receive, send)
    return sent, asked


def test_a_chunked_body_gets_413_as_soon_as_it_passes_the_limit_and_is_read_no_further(small_limit):
    chunks = [b"x" * 1024] * 100  # 100 KiB, no Content-Length

    sent, asked = call_asgi([(b"transfer-encoding", b"chunked")], chunks)

    assert asked == LIMIT // 1024 + 1  # the chunk that passed the limit was the last one read
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["detail"] == (
        f"request body is larger than the limit of {LIMIT} bytes (MAX_REQUEST_BODY_BYTES)"
    )
    assert len(sent) == 2  # Django answered nothing more
    assert not AlertSession.objects.exists()


def test_a_declared_length_over_the_limit_gets_413_before_any_body_is_read(small_limit):
    sent, asked = call_asgi([(b"content-length", str(LIMIT + 1).encode())], [b"x" * (LIMIT + 1)])

    assert asked == 0
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["detail"].startswith(f"request body of {LIMIT + 1} bytes")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"session_id": NaN}', "JSON parse error"),
        (b"\xff\xfe{}", "JSON parse error"),
        ('{"truncated": ', "JSON parse error"),
    ],
    ids=["deeply-nested", "nan", "not-utf8", "truncated"],
)
def test_bodies_that_are_not_json_are_400_with_a_message(body, says):
    for url in (SESSIONS_URL, score_url(make_session().session_id)):
        response = proxy_client().post(url, body, content_type="application/json")
        assert response.status_code == 400, (url, response.content[:200])
        assert says in response.json()["detail"]
    assert not SessionScore.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"started_at_us": 10**30}, "started_at_us"),
        ({"alert_type": "x" * 1000}, "alert_type"),
        ({"session_id": "../../etc/passwd"}, "session_id"),
    ],
    ids=["huge-integer", "too-long", "path-as-id"],
)
def test_values_the_database_cannot_hold_are_400_naming_the_field(overrides, field):
    response = proxy_client().post(SESSIONS_URL, session_document(**overrides), format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not AlertSession.objects.exists()


@pytest.mark.parametrize("query", ["?page=abc", "?page=0", "?page=99999"])
def test_a_bad_page_is_404_with_a_message(query):
    response = proxy_client().get(SESSIONS_URL + query)
    assert response.status_code == 404
    assert response.json() == {"detail": "Invalid page."}


@pytest.mark.parametrize("query", ["?status=%00", "?alert_type=%00"])
def test_nul_characters_in_filters_are_400(query):
    assert proxy_client().get(SESSIONS_URL + query).status_code == 400


@pytest.mark.parametrize("raw_id", ["%00", "%E2%80%AE", "1%20OR%201=1", "x" * 300])
def test_hostile_session_ids_are_404_on_every_endpoint(raw_id):
    client = proxy_client()
    for response in (
        client.get(f"{SESSIONS_URL}{raw_id}/"),
        client.get(score_url(raw_id)),
        client.post(score_url(raw_id)),
    ):
        assert response.status_code == 404
        assert "detail" in response.json()
