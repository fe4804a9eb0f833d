"""An alert's name and one-line summary (``scoring.tarsy.alert``), from the alert data
as TARSy keeps it: our samples of both sources, the real tarsy-bot documents, and other shapes."""

import json

import pytest

from scoring.tarsy.alert import SUMMARY_CHARS, AlertHeading, alert_heading
from tests.support.samples import SAMPLES, SAMPLES_DIR, load, unsaved_session
from tests.support.tarsy import real_documents


def heading_of(document: dict) -> AlertHeading:
    summary = document.get("final_analysis_summary")
    return alert_heading(document["alert_type"], document["alert_data"], summary)


def test_samples_are_named_by_their_alert_and_summed_up_by_its_message():
    document = json.loads((SAMPLES_DIR / "05_failed_tool_recovery.json").read_text())
    assert heading_of(document) == AlertHeading(
        "KubeHpaMaxedOut", "HPA checkout/checkout-web has been running at max replicas (20) for 30 minutes"
    )


def test_a_go_sample_is_named_by_the_alert_its_text_holds():
    session = unsaved_session(load(SAMPLES_DIR / "12_go_parallel_agents.json"))
    assert isinstance(session.alert_data, str)
    assert session.heading == AlertHeading(
        "KafkaConsumerGroupLagHigh",
        "Consumer group billing-invoicer is 39383 messages behind on payments.settled and its lag has grown "
        "for 20 minutes",
    )


def test_every_sample_has_its_own_heading():
    # As the pages show it: from the stored session, whichever source its document came from.
    headings = [unsaved_session(load(path)).heading for path in SAMPLES]
    assert len(set(headings)) == len(headings)
    assert all(heading.summary for heading in headings)


def test_real_tarsy_bot_alerts_without_a_name_keep_their_type_and_are_summed_up_by_their_description():
    # tarsy-bot's own alerts carry a description and identifying fields, no name.
    for document in real_documents():
        heading = heading_of(document)
        assert heading.title == document["alert_type"]
        assert heading.summary == document["alert_data"]["description"]


@pytest.mark.parametrize(
    ("alert_data", "final_analysis_summary", "expected"),
    [
        # Alertmanager: the name in labels, the text in annotations.
        (
            {"labels": {"alertname": "KubeJobFailed"}, "annotations": {"summary": "Job failed."}},
            None,
            AlertHeading("KubeJobFailed", "Job failed."),
        ),
        # Spellings of the same keys.
        ({"alertName": "DiskFull", "Description": "Disk full"}, None, AlertHeading("DiskFull", "Disk full")),
        ({"alert_name": "Full", "message": " two\n\n lines "}, None, AlertHeading("Full", "two lines")),
        # No text of the alert's own: TARSy's summary of its analysis.
        ({"alert": "X"}, "The disk filled up.", AlertHeading("X", "The disk filled up.")),
        # Nothing to sum up: the alert's first identifying fields.
        (
            {"namespace": "production", "pod_name": "api-1", "labels": {}, "restart_count": 5, "more": "x"},
            "",
            AlertHeading("web", "namespace: production · pod_name: api-1 · restart_count: 5"),
        ),
        # A name or text that is not a string is not one; nor is alert data that is not an object.
        ({"alert": 7, "message": ["a"], "ok": True, "labels": {"x": "y"}}, None, AlertHeading("web", "")),
        ({"alert": "Named", "pod": "api-7f"}, None, AlertHeading("Named", "pod: api-7f")),
        ([1, 2], None, AlertHeading("web", "")),
    ],
)
def test_any_shape_of_alert_data(alert_data, final_analysis_summary, expected):
    assert alert_heading("web", alert_data, final_analysis_summary) == expected


def test_a_long_text_is_cut_at_a_word_on_one_line():
    message = "Pod payments-api restarted " + "again and " * 100_000
    summary = alert_heading("web", {"message": message}, None).summary
    assert len(summary) <= SUMMARY_CHARS and "\n" not in summary
    assert summary.startswith("Pod payments-api restarted again and again")
    assert summary.endswith("again and…") or summary.endswith("again…")


def test_a_go_tarsy_alert_in_plain_text_is_summed_up_by_its_first_words():
    assert alert_heading("test-alert", "Pod OOMKilled\nnamespace: default", None) == AlertHeading(
        "test-alert", "Pod OOMKilled namespace: default"
    )


def test_a_go_tarsy_alert_that_is_json_text_is_read_as_the_object_it_holds():
    text = json.dumps({"labels": {"alertname": "KubePodCrashLooping"}, "annotations": {"summary": "pod restarts"}})
    assert alert_heading("kubernetes", text, "unused") == AlertHeading("KubePodCrashLooping", "pod restarts")


@pytest.mark.parametrize(
    ("text", "summary"),
    [
        ("", "Summary of the analysis"),
        ("[1, 2]", "[1, 2]"),
        ("{not json", "{not json"),
        ('{"a":' + "[" * 30000, '{"a":' + "[" * 154 + "…"),
        # Too long to be read as JSON for a heading: shown as text, cut.
        ('{"alertname": "X", "pad": "' + "x" * 70000 + '"}', '{"alertname": "X", "pad": "' + "x" * 132 + "…"),
    ],
)
def test_a_go_tarsy_alert_text_that_holds_no_object_is_shown_as_text(text, summary):
    assert alert_heading("kubernetes", text, "Summary of the analysis") == AlertHeading("kubernetes", summary)
