"""The OpenAPI schema documents the scoring endpoints; the docs pages work offline."""

import pytest
from django.core.management import call_command
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from scoring.api.schema import forget_rendered_schemas

pytestmark = pytest.mark.django_db
SCORE_PATH = "/api/v1/scoring/sessions/{session_id}/score"


@pytest.fixture
def schema() -> dict:
    response = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return response.json()


def resolve(schema: dict, node: dict) -> dict:
    ref = node.get("$ref")
    return resolve(schema, schema["components"]["schemas"][ref.rsplit("/", 1)[1]]) if ref else node


def body_schema(schema: dict, operation: dict, code: str) -> dict:
    return resolve(schema, operation["responses"][code]["content"]["application/json"]["schema"])


def test_post_score_documents_both_success_bodies_and_every_error(schema):
    post = schema["paths"][SCORE_PATH]["post"]
    assert set(post["responses"]) == {"200", "202", "400", "401", "404", "409", "429", "500"}
    assert set(body_schema(schema, post, "202")["properties"]) == {"score_id", "session_id", "status"}
    finished = body_schema(schema, post, "200")["properties"]
    assert {"total_score", "score_analysis", "missing_tools_analysis", "current_prompt_used", "prompt_hash"} <= set(
        finished
    )
    for code in ("400", "401", "404", "500"):
        assert "detail" in body_schema(schema, post, code)["properties"]
    conflicts = [resolve(schema, shape) for shape in body_schema(schema, post, "409")["oneOf"]]
    assert [set(shape["required"]) for shape in conflicts] == [{"detail", "score_id", "status"}, {"detail", "over_budget"}]
    request = resolve(schema, post["requestBody"]["content"]["application/json"]["schema"])
    assert request["properties"]["force_rescore"]["type"] == "boolean"
    assert request["properties"]["confirm_over_budget"]["type"] == "boolean"


def test_get_score_documents_its_body_and_errors(schema):
    get = schema["paths"][SCORE_PATH]["get"]
    assert set(get["responses"]) == {"200", "401", "404", "500"}
    assert "current_prompt_used" in body_schema(schema, get, "200")["properties"]


def test_a_scores_dimensions_and_missing_tools_are_documented_with_an_example(schema):
    get = schema["paths"][SCORE_PATH]["get"]
    score = body_schema(schema, get, "200")["properties"]
    dimensions = score["dimensions"]
    assert dimensions.get("nullable") is True or {"type": "null"} in dimensions.get("oneOf", [])
    criteria = resolve(schema, (dimensions.get("allOf") or dimensions.get("oneOf") or [dimensions])[0])
    assert set(criteria["properties"]) == {"logical_flow", "consistency", "tool_relevance", "synthesis_quality"}
    assert criteria["properties"]["logical_flow"]["maximum"] == 25
    assert score["missing_tools"]["items"]["type"] == "string"
    (example,) = get["responses"]["200"]["content"]["application/json"]["examples"].values()
    assert set(example["value"]) == set(score)
    assert example["value"]["missing_tools"] == ["kubectl-logs", "kubectl-get-events"]


def test_get_score_documents_the_samples_with_an_example(schema):
    get = schema["paths"][SCORE_PATH]["get"]
    properties = body_schema(schema, get, "200")["properties"]
    assert properties["score_samples"]["type"] == "array" and properties["score_samples"]["nullable"] is True
    assert properties["score_samples"]["items"]["nullable"] is True
    assert properties["score_spread"]["nullable"] is True and properties["unstable"]["type"] == "boolean"
    [example] = get["responses"]["200"]["content"]["application/json"]["examples"].values()
    assert example["value"]["score_samples"] == [62, 70, 85] and example["value"]["unstable"] is True
    assert set(example["value"]) == set(properties)


def test_get_score_documents_the_input_coverage_with_an_example(schema):
    get = schema["paths"][SCORE_PATH]["get"]
    coverage = body_schema(schema, get, "200")["properties"]["input_coverage"]
    assert coverage["type"] == "number" and coverage["nullable"] is True
    assert "context window" in coverage["description"]
    [example] = get["responses"]["200"]["content"]["application/json"]["examples"].values()
    assert 0 < example["value"]["input_coverage"] < 1
    assert any(warning.startswith("input shortened: ") for warning in example["value"]["warnings"])


def test_swagger_ui_is_served_from_our_own_static_files():
    page = APIClient().get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "cdn.jsdelivr" not in html and "unpkg.com" not in html


def test_a_400_body_is_documented_as_a_detail_beside_messages_by_field(schema):
    for path, method in ((SCORE_PATH, "post"), ("/api/v1/sessions/", "post"), ("/api/v1/sessions/", "get")):
        body = body_schema(schema, schema["paths"][path][method], "400")
        assert body["required"] == ["detail"] and body["properties"]["detail"]["type"] == "string", path
        assert body["additionalProperties"] == {"type": "array", "items": {"type": "string"}}, path
        examples = schema["paths"][path][method]["responses"]["400"]["content"]["application/json"]["examples"]
        assert all(set(example["value"]) > {"detail"} for example in examples.values()), path


def test_the_session_list_documents_each_sessions_heading_and_newest_score(schema):
    page = body_schema(schema, schema["paths"]["/api/v1/sessions/"]["get"], "200")
    item = resolve(schema, page["properties"]["results"]["items"])
    assert {"alert_title", "alert_summary", "latest_score"} <= set(item["properties"])
    latest = item["properties"]["latest_score"]
    assert latest.get("nullable") is True or {"type": "null"} in latest.get("oneOf", [])
    score = resolve(schema, (latest.get("allOf") or latest.get("oneOf") or [latest])[0])
    assert set(score["properties"]) == {
        "score_id", "status", "total_score", "band", "current_prompt_used", "error_message", "dimensions",
        "missing_tools",
    }  # fmt: skip
    band = resolve(schema, score["properties"]["band"])
    assert set(resolve(schema, (band.get("oneOf") or band.get("allOf") or [band])[0])["enum"]) == {
        "poor", "weak", "good"
    }  # fmt: skip
    request = schema["paths"]["/api/v1/sessions/"]["post"]["requestBody"]["content"]["application/json"]
    documents = [resolve(schema, one) for one in resolve(schema, request["schema"])["oneOf"]]
    assert all("alert_title" not in document["properties"] for document in documents)
    # Either source's document: tarsy-bot's history document or Go TARSy's assembled one.
    assert [set(document["required"]) & {"stages", "format"} for document in documents] == [{"stages"}, {"format"}]



def test_the_schema_generates_without_a_warning():
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", "/dev/null")


INSIGHT_OPERATIONS = [
    ("/api/v1/scoring/sessions/{session_id}/scores", "get", "200"),
    ("/api/v1/scoring/stats/", "get", "200"),
    ("/api/v1/scoring/missing-tools/", "get", "200"),
    ("/api/v1/scoring/agreement/", "get", "200"),
    ("/api/v1/scoring/scores/{score_id}/reviews", "post", "201"),
    ("/api/v1/scoring/reports/", "post", "202"),
    ("/api/v1/scoring/reports/{report_id}", "get", "200"),
]


@pytest.mark.parametrize(("path", "method", "code"), INSIGHT_OPERATIONS)
def test_every_insight_endpoint_has_an_example_answer(schema, path, method, code):
    content = schema["paths"][path][method]["responses"][code]["content"]
    assert any(media.get("examples") for media in content.values())


@pytest.fixture
def schemas_made(monkeypatch):
    """How many times the schema was made (drf-spectacular's generator run), from no kept answer."""
    made = []
    generate = SchemaGenerator.get_schema

    def counted(self, *args, **kwargs):
        made.append(1)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    forget_rendered_schemas()
    yield made
    forget_rendered_schemas()


def test_the_schema_is_made_once_per_process_and_format(schemas_made):
    client = APIClient()
    yaml = [client.get("/api/schema/") for _ in range(3)]
    json = [client.get("/api/schema/", HTTP_ACCEPT="application/json") for _ in range(3)]

    assert len(schemas_made) == 2
    assert {answer.content for answer in yaml} == {yaml[0].content}
    assert yaml[2]["Content-Type"] == "application/vnd.oai.openapi; charset=utf-8"
    assert (json[2]["Content-Type"], json[2]["Content-Disposition"]) == (
        "application/json", 'inline; filename="tarsy-scoring API.json"'
    )
    assert json[2].json() == json[0].json() and SCORE_PATH in json[2].json()["paths"]


def test_a_schema_in_another_language_is_made_each_time_and_never_kept(schemas_made):
    client = APIClient()
    for _ in range(2):
        assert client.get("/api/schema/?lang=en", HTTP_ACCEPT="application/json").status_code == 200
    client.get("/api/schema/", HTTP_ACCEPT="application/json")

    assert len(schemas_made) == 3


def test_a_schema_asked_with_another_parameter_is_never_kept_for_others(schemas_made):
    client = APIClient()
    asked = client.get("/api/schema/?version=EVIL", HTTP_ACCEPT="application/json")
    plain = client.get("/api/schema/", HTTP_ACCEPT="application/json")

    assert "EVIL" in asked.json()["info"]["version"]
    assert "EVIL" not in plain.json()["info"]["version"] and "EVIL" not in plain["Content-Disposition"]
    assert len(schemas_made) == 2
