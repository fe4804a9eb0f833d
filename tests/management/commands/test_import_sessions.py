"""The import_sessions command: files, folders and stdin; bad records never lose good ones."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from scoring.models import AlertSession, SessionSource, SessionWrite
from tests.support.api import session_document
from tests.support.samples import SAMPLES, SAMPLES_DIR, TARSY_BOT_SAMPLES, TARSY_GO_SAMPLES
STATUS_LIST = "pending, in_progress, paused, canceling, completed, failed, cancelled, timed_out"


def import_sessions(*paths, stdin: bytes = b"") -> tuple[str, str, bool]:
    """Run the command; return its stdout, its stderr and whether it failed."""
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        call_command(
            "import_sessions", *map(str, paths), stdout=stdout, stderr=stderr, stdin=io.BytesIO(stdin)
        )
    except CommandError as exc:
        stderr.write(f"CommandError: {exc}\n")
        return stdout.getvalue(), stderr.getvalue(), True
    return stdout.getvalue(), stderr.getvalue(), False


def outcomes(out: str) -> str:
    """The last line's counts of what storing did, without its counts by source."""
    return out.strip().splitlines()[-1].split("; ")[0]


def stored_ids() -> set[str]:
    return {str(session_id) for session_id in AlertSession.objects.values_list("session_id", flat=True)}


def jsonl(*documents) -> str:
    return "".join(json.dumps(document) + "\n" for document in documents)


def test_a_malformed_record_in_a_list_is_reported_and_the_others_stored(db, tmp_path):
    good = [session_document(), session_document()]
    file = tmp_path / "sessions.json"
    file.write_text(json.dumps([good[0], session_document(status="running"), good[1]]))

    out, err, failed = import_sessions(file)

    assert failed
    assert f"rejected: {file}[1]: status: 'running' is not a TARSy session status; expected one of: " in err
    assert "CommandError: 1 rejected, 2 stored" in err
    assert outcomes(out) == "unchanged: 0, created: 2, updated: 0, rejected: 1"
    assert stored_ids() == {document["session_id"] for document in good}


def test_a_jsonl_file_reports_bad_lines_by_line_number(db, tmp_path):
    good = [session_document(), session_document()]
    file = tmp_path / "sessions.jsonl"
    file.write_text(jsonl(good[0]) + "\n" + "{not json\n" + jsonl({"session_id": "x"}) + jsonl(good[1]))

    out, err, failed = import_sessions(file)

    assert failed
    rejections = [line for line in err.splitlines() if line.startswith("rejected:")]
    assert rejections[0] == (
        f"rejected: {file}[3]: not valid JSON: "
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    )
    assert rejections[1].startswith(
        f"rejected: {file}[4]: session_id: 'x' is not a valid UUID.; alert_type: "
    )
    assert len(rejections) == 2
    assert outcomes(out) == "unchanged: 0, created: 2, updated: 0, rejected: 2"
    assert stored_ids() == {document["session_id"] for document in good}


def test_a_folder_imports_its_json_and_jsonl_files_recursively(db, tmp_path):
    documents = [session_document() for _ in range(4)]
    (tmp_path / "one.json").write_text(json.dumps(documents[0]))
    (tmp_path / "nested" / "deeper").mkdir(parents=True)
    (tmp_path / "nested" / "two.jsonl").write_text(jsonl(documents[1], documents[2]))
    (tmp_path / "nested" / "deeper" / "three.json").write_text(json.dumps([documents[3]]))
    (tmp_path / "nested" / "notes.txt").write_text("not a session")

    out, err, failed = import_sessions(tmp_path)

    assert not failed, err
    assert outcomes(out) == "unchanged: 0, created: 4, updated: 0, rejected: 0"
    assert stored_ids() == {document["session_id"] for document in documents}


@pytest.mark.parametrize("as_jsonl", [False, True], ids=["json", "jsonl"])
def test_stdin_holds_json_or_jsonl(db, as_jsonl):
    documents = [session_document(), session_document()]
    content = jsonl(*documents) if as_jsonl else json.dumps(documents, indent=2)

    out, err, failed = import_sessions("-", stdin=content.encode())

    assert not failed, err
    assert outcomes(out) == "unchanged: 0, created: 2, updated: 0, rejected: 0"
    assert stored_ids() == {document["session_id"] for document in documents}


def test_a_file_that_is_not_json_is_one_rejection_with_the_parser_position(db, tmp_path):
    file = tmp_path / "broken.json"
    file.write_text('[\n  {"session_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7",\n  oops\n]')

    out, err, failed = import_sessions(file)

    assert failed
    assert err.splitlines()[0] == (
        f"rejected: {file}[0]: not valid JSON: Expecting property name enclosed in double quotes: "
        "line 3 column 3 (char 61) (the list is cut short or broken from here on)"
    )
    assert outcomes(out) == "unchanged: 0, created: 0, updated: 0, rejected: 1"


def test_a_file_that_is_not_json_at_all_is_one_rejection(db, tmp_path):
    file = tmp_path / "notes.json"
    file.write_text("session 7c9e6679 was fine")
    out, err, failed = import_sessions(file)
    assert failed and err.splitlines()[0].startswith(f"rejected: {file}: not valid JSON: Expecting value")
    assert outcomes(out) == "unchanged: 0, created: 0, updated: 0, rejected: 1"


@pytest.mark.parametrize(("cut", "complete"), [("mid-record", 2), ("after-a-comma", 2), ("closing-bracket", 3)])
def test_a_list_cut_short_keeps_the_complete_sessions_before_the_cut(db, tmp_path, cut, complete):
    documents = [session_document() for _ in range(3)]
    text = json.dumps(documents, indent=2)
    third = text.index(documents[2]["session_id"])
    cut_at = {"mid-record": third + 30, "after-a-comma": text.rindex("},", 0, third) + 2, "closing-bracket": len(text) - 1}
    file = tmp_path / "export.json"
    file.write_text(text[: cut_at[cut]])

    out, err, failed = import_sessions(file)

    assert failed
    assert f"rejected: {file}[{complete}]: not valid JSON" in err and "cut short or broken from here on" in err
    assert outcomes(out) == f"unchanged: 0, created: {complete}, updated: 0, rejected: 1"
    assert stored_ids() == {document["session_id"] for document in documents[:complete]}


def test_a_missing_path_fails_the_command_but_the_other_paths_are_imported(db, tmp_path):
    document = session_document()
    file = tmp_path / "session.json"
    file.write_text(json.dumps(document))
    missing = tmp_path / "nothere.json"

    out, err, failed = import_sessions(missing, file)

    assert failed
    assert f"rejected: {missing}: no such file or folder" in err
    assert outcomes(out) == "unchanged: 0, created: 1, updated: 0, rejected: 1"
    assert stored_ids() == {document["session_id"]}


def test_importing_again_updates_the_changed_and_leaves_the_unchanged_alone(db, tmp_path):
    documents = [session_document(), session_document()]
    file = tmp_path / "sessions.json"
    file.write_text(json.dumps(documents))
    import_sessions(file)
    documents[0]["final_analysis"] = "Revised analysis."
    file.write_text(json.dumps(documents))

    out, err, failed = import_sessions(file)

    assert not failed, err
    assert outcomes(out) == "unchanged: 1, created: 0, updated: 1, rejected: 0"
    assert AlertSession.objects.count() == 2
    assert (
        AlertSession.objects.get(session_id=documents[0]["session_id"]).final_analysis == "Revised analysis."
    )


def test_a_20_mb_session_is_imported_whole(db, tmp_path):
    document = session_document()
    messages = document["stages"][0]["llm_interactions"][0]["details"]["conversation"]["messages"]
    messages.extend(
        {"role": "user", "content": f"kubectl logs line {n} " + "x" * 20_000} for n in range(1000)
    )
    file = tmp_path / "large.json"
    file.write_text(json.dumps(document))

    out, err, failed = import_sessions(file)

    assert not failed, err
    session = AlertSession.objects.get(session_id=document["session_id"])
    assert session.investigation_bytes > 20_000_000
    assert session.stages == document["stages"]


def test_every_bundled_sample_imports_without_rejections_as_its_source(db):
    assert sorted(SAMPLES_DIR.glob("*.json*")) == SAMPLES
    assert len(TARSY_BOT_SAMPLES) >= 9

    out, err, failed = import_sessions(SAMPLES_DIR)
    again, _, _ = import_sessions(SAMPLES_DIR)

    assert not failed, err
    assert out.strip() == (
        f"unchanged: 0, created: {len(SAMPLES)}, updated: 0, rejected: 0; "
        f"tarsy-bot: {len(TARSY_BOT_SAMPLES)}, tarsy-go: {len(TARSY_GO_SAMPLES)}"
    )
    assert outcomes(again) == f"unchanged: {len(SAMPLES)}, created: 0, updated: 0, rejected: 0"
    assert AlertSession.objects.filter(source=SessionSource.TARSY_GO).count() == len(TARSY_GO_SAMPLES)


def test_nul_characters_are_replaced_noted_and_reported_the_same_on_every_import(db, tmp_path):
    document = session_document(final_analysis="PID 1: python\x00manage.py")
    file = tmp_path / "session.json"
    file.write_text(json.dumps(document))
    note = (
        "1 NUL character (\\u0000), which the database cannot store, replaced with U+FFFD in: final_analysis (1)."
    )

    first, _, _ = import_sessions(file)
    again, _, _ = import_sessions(file)

    assert first.splitlines() == [
        f"noted: {file}: {note}", "unchanged: 0, created: 1, updated: 0, rejected: 0; tarsy-bot: 1, tarsy-go: 0",
    ]
    assert again.splitlines() == [
        f"noted: {file}: {note}", "unchanged: 1, created: 0, updated: 0, rejected: 0; tarsy-bot: 1, tarsy-go: 0",
    ]
    session = AlertSession.objects.get()
    assert session.final_analysis == "PID 1: python\ufffdmanage.py"
    assert session.ingest_notes == [note]


def test_importing_unchanged_sessions_again_writes_nothing(db, tmp_path):
    documents = [session_document(), session_document()]
    file = tmp_path / "sessions.json"
    file.write_text(json.dumps(documents))
    import_sessions(file)
    before = {row.session_id: row.updated_at for row in AlertSession.objects.all()}
    writes = SessionWrite.objects.count()

    out, err, failed = import_sessions(file)

    assert not failed, err
    assert outcomes(out) == "unchanged: 2, created: 0, updated: 0, rejected: 0"
    assert {row.session_id: row.updated_at for row in AlertSession.objects.all()} == before
    assert SessionWrite.objects.count() == writes


def test_a_folder_says_which_files_it_did_not_read(db, tmp_path):
    (tmp_path / "session.json").write_text(json.dumps(session_document()))
    for name in ("README.md", "notes.txt"):
        (tmp_path / name).write_text("not sessions")

    out, err, failed = import_sessions(tmp_path)

    assert not failed, err
    assert err.splitlines() == [
        f"skipped: {tmp_path}: 2 files not read (only .json and .jsonl files are): README.md, notes.txt"
    ]
    assert outcomes(out) == "unchanged: 0, created: 1, updated: 0, rejected: 0"


def test_a_folder_without_session_files_says_so(db, tmp_path):
    out, err, failed = import_sessions(tmp_path)

    assert not failed
    assert err.splitlines() == [f"skipped: {tmp_path}: no .json or .jsonl files in this folder"]
    assert outcomes(out) == "unchanged: 0, created: 0, updated: 0, rejected: 0"


@pytest.mark.parametrize(("name", "content"), [("empty.json", "[]"), ("blank.jsonl", "\n\n")])
def test_a_file_without_sessions_says_so(db, tmp_path, name, content):
    file = tmp_path / name
    file.write_text(content)

    out, err, failed = import_sessions(file)

    assert not failed
    assert err.splitlines() == [f"skipped: {file}: holds no sessions (an empty list or no lines)"]
    assert outcomes(out) == "unchanged: 0, created: 0, updated: 0, rejected: 0"
