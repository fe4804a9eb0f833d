"""The HTTP client of the sync (scoring.tarsy.client) against a stand-in TARSy that answers
what a broken or hostile one would: bodies of every kind, error pages with terminal escapes,
a token echoed back; behind TLS signed by a private CA; with a token file that rotates."""

import json
import logging
import os

import pytest

from scoring.tarsy.client import (
    BadAnswer,
    DeadlineReached,
    SyncError,
    TarsyAuthRejected,
    TarsyClient,
    TokenFile,
    parse_json,
    printable,
)
from tests.support.tarsy import StandInTarsy, real_documents
from tests.support.tls import private_ca_certificate

PATH = "/api/v1/anything"


@pytest.fixture
def stand_in():
    server = StandInTarsy(real_documents()[:1])
    yield server
    server.stop()


def client_of(server, **options) -> TarsyClient:
    return TarsyClient(server.url, max_retries=0, backoff_s=0, timeout_s=10, **options)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html><body>Sign in</body></html>", "is not JSON (text/html); is a login page"),
        (b"[" * 1000 + b"]" * 1000, "is JSON nested too deeply to read"),
        (b'{"count": ' + b"7" * 5000 + b"}", "is not JSON this service can read: Exceeds the limit"),
        (b'{"ratio": 1e999999}', "is not JSON this service can read: the number 1e999999 is out of range"),
        (b'{"ratio": NaN}', "is not JSON this service can read: NaN is not a JSON number"),
    ],
)
def test_an_answer_that_is_not_json_this_service_can_store_is_a_bad_answer(stand_in, body, reason):
    stand_in.raw_answers[PATH] = (200, "text/html", body)

    with pytest.raises(BadAnswer) as caught:
        client_of(stand_in).get_json(PATH)

    assert f"TARSy's answer to GET {stand_in.url}{PATH} " in str(caught.value)
    assert reason in str(caught.value)


def test_an_answer_over_the_size_limit_is_refused_before_it_is_read_whole(stand_in):
    stand_in.raw_answers[PATH] = (200, "application/json", json.dumps({"a": "x" * 5000}).encode())

    with pytest.raises(BadAnswer, match=r"is 5009 bytes, over TARSY_SYNC_MAX_ANSWER_BYTES \(4096 bytes\)"):
        client_of(stand_in, max_answer_bytes=4096).get_json(PATH)
    assert client_of(stand_in, max_answer_bytes=8192).get_json(PATH) == {"a": "x" * 5000}


def test_an_error_body_is_quoted_with_its_control_characters_escaped(stand_in):
    stand_in.raw_answers[PATH] = (418, "text/plain", b"\x1b[2J\x1b[31mcleared\r\nfake: line\x07")

    with pytest.raises(SyncError) as caught:
        client_of(stand_in).get_json(PATH)

    message = str(caught.value)
    assert message.endswith(r"\x1b[2J\x1b[31mcleared\r\nfake: line\x07")
    assert message.isprintable()


def test_credentials_echoed_back_by_tarsy_never_reach_a_message_or_a_log(stand_in, caplog, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("rotating-token-1\n")
    stand_in.raw_answers[PATH] = (400, "text/plain", b"bad request with Bearer rotating-token-1 and cookie c00kie")
    client = client_of(stand_in, token_file=TokenFile(str(token_file)), headers={"Cookie": "c00kie"})

    with caplog.at_level(logging.DEBUG), pytest.raises(SyncError) as caught:
        client.get_json(PATH)

    assert "Bearer <credentials> and cookie <credentials>" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert "rotating-token-1" not in caplog.text and "c00kie" not in caplog.text


def test_a_token_with_a_line_break_inside_is_refused_without_showing_it(stand_in):
    with pytest.raises(SyncError) as caught:
        client_of(stand_in, token="first-half\nsecond-half").get_json(PATH)

    assert "holds a line break" in str(caught.value)
    assert "half" not in str(caught.value)
    assert stand_in.requests == []


def test_a_token_file_is_stripped_and_read_again_when_it_changes(stand_in, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("  first-token\n")
    client = client_of(stand_in, token_file=TokenFile(str(token_file)))

    client.get_json("/api/v1/history/sessions")
    token_file.write_text("second-token\n")
    os.utime(token_file, ns=(1, 1))  # a rotation within the same clock tick still shows
    client.get_json("/api/v1/history/sessions")

    assert [headers["Authorization"] for headers in stand_in.request_headers] == [
        "Bearer first-token", "Bearer second-token"
    ]  # fmt: skip


def test_an_unreadable_token_file_is_reported_without_its_content(tmp_path):
    with pytest.raises(SyncError, match="cannot read the token file .*: FileNotFoundError"):
        TokenFile(str(tmp_path / "missing")).token()


def test_https_with_a_private_ca_is_verified_against_the_ca_bundle(tmp_path):
    certificate = private_ca_certificate(tmp_path)
    server = StandInTarsy(real_documents()[:1], tls=certificate)
    try:
        with pytest.raises(SyncError, match="CERTIFICATE_VERIFY_FAILED"):
            client_of(server).get_json("/api/v1/history/sessions")
        trusted = client_of(server, ca_bundle=str(certificate.ca_bundle))
        assert trusted.get_json("/api/v1/history/sessions")["pagination"]["total_items"] == 1
    finally:
        server.stop()


def test_an_unreadable_ca_bundle_is_reported(stand_in, tmp_path):
    bundle = tmp_path / "ca.pem"
    bundle.write_text("not a certificate")

    with pytest.raises(SyncError, match=f"cannot read the CA bundle {bundle}"):
        client_of(stand_in, ca_bundle=str(bundle)).get_json(PATH)


def test_no_request_starts_after_the_deadline(stand_in):
    with pytest.raises(DeadlineReached):
        client_of(stand_in, deadline=0.0).get_json(PATH)
    assert stand_in.requests == []


def test_a_redirect_is_refused_and_its_location_escaped(stand_in):
    stand_in.fail_next(302)

    with pytest.raises(TarsyAuthRejected, match="redirecting to https://login.example.com/oauth2/start"):
        client_of(stand_in).get_json(PATH)


def test_printable_leaves_text_as_it_is_and_escapes_only_control_characters():
    assert printable("naïve café ✓ 漢字") == "naïve café ✓ 漢字"
    assert printable("a\tb\x00c\u202ed") == r"a\tb\x00c\u202ed"


def test_parse_json_reads_what_a_document_holds():
    assert parse_json(b'{"a": [1, 2.5, "x", null, true]}', "it") == {"a": [1, 2.5, "x", None, True]}
