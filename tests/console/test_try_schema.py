"""The Try a job page's JSON Schema check, in a real headless Chromium against a real `serve`:
the schema the page checks with is exactly the JobSpec model's (from the gateway's OpenAPI
document); a wrong type, an unknown field and a value below its minimum are each named at
their field without any request to the placement endpoint; the examples pass; a hostile
field name stays text; and the browser's validator agrees with Python's `jsonschema` on the
same schema and documents (verdicts and field paths)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
from jsonschema import Draft202012Validator, ValidationError
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from iri_gateway.console.routes import STATIC_DIR
from iri_gateway.errors import json_path
from iri_gateway.models.jobspec import JobSpec
from tests.console.conftest import Console, requested_urls, screenshots, sign_in, wait_for

CHECKED = "document.getElementById('check-status').textContent"
NOT_SENT = "Not sent: the JobSpec does not match its JSON Schema."
EXAMPLES = ("plain", "gpu-mpi", "flavours", "roles")
REF = "#/components/schemas/JobSpec"

# Each run in the browser: the module's own loader (GET /openapi.json) and validator.
VALIDATE = """
const [documents, done] = arguments;
import("/console/static/jobspec-schema.js").then(async (m) => {
  const schema = await m.loadSchemaDocument();
  done({ schemas: schema.components.schemas,
         results: documents.map((d) => m.validate(schema, d)) });
}).catch((e) => done({ failed: String(e) }));
"""


def open_try(driver: WebDriver, console: Console) -> None:
    sign_in(driver, console, console.admin)
    driver.find_element(By.LINK_TEXT, "Try a job").click()
    wait_for(driver, "location.pathname === '/console/try'")


def typed(driver: WebDriver, text: str) -> None:
    field = driver.find_element(By.ID, "spec")
    field.clear()
    field.send_keys(text)


def problems(driver: WebDriver) -> list[list[str]]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#problem-list li')].map("
        "li => [li.dataset.field, li.querySelector('.field-path').textContent, li.textContent])"
    )


def in_browser(driver: WebDriver, documents: list[Any]) -> dict[str, Any]:
    found = driver.execute_async_script(VALIDATE, documents)
    assert "failed" not in found, found
    return found


def _without_none(value: Any) -> Any:
    """The schema as FastAPI publishes it: its OpenAPI encoder drops every member whose value
    is None (here only the annotation `"default": null`)."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def test_the_page_checks_against_the_jobspec_models_own_schema(
    page: WebDriver, console: Console
) -> None:
    open_try(page, console)
    wait_for(
        page, "performance.getEntriesByType('resource').some(r => r.name.endsWith('/openapi.json'))"
    )
    schemas = in_browser(page, [])["schemas"]
    model = _without_none(JobSpec.model_json_schema(ref_template="#/components/schemas/{model}"))
    definitions = model.pop("$defs")
    assert schemas["JobSpec"] == model
    for name, definition in definitions.items():
        assert schemas[name] == definition, name


def test_schema_errors_are_named_at_their_fields_without_asking_the_gateway(
    page: WebDriver, console: Console
) -> None:
    open_try(page, console)
    requested_urls(page)  # forget the page's own requests
    typed(
        page,
        '{"executable": "/bin/echo", "nmae": "x",\n'
        ' "resources": {"node_count": 0, "process_count": "two"}}',
    )
    wait_for(page, f"{CHECKED} === {json.dumps(NOT_SENT)}", 20)
    assert problems(page) == [
        [
            "resources.node_count",
            "resources.node_count",
            "resources.node_count: must be at least 1",
        ],
        [
            "resources.process_count",
            "resources.process_count",
            'resources.process_count: must be an integer or null, not the text "two"',
        ],
        [
            "nmae",
            "nmae",
            "nmae: unknown field; the JobSpec does not define it (did you mean name?)",
        ],
    ]
    assert page.find_element(By.ID, "problems-heading").text == (
        "The JobSpec breaks its JSON Schema"
    )
    assert page.find_element(By.ID, "placement-section").get_attribute("hidden") is not None
    sent = [url for url in requested_urls(page) if "/api/v2/compute/" in url]
    assert sent == [], sent
    screenshots(page, "try-schema")


def test_the_gateway_still_judges_what_the_schema_cannot_say(
    page: WebDriver, console: Console
) -> None:
    """A JobSpec that fits the schema but breaks a rule only the model knows (a life cycle
    without roles; a field under its name and its alias) is sent, and the 422 is shown."""
    spec = (
        '{"executable": "/bin/echo", "cluster_lifecycle": "all_must_end",'
        ' "container": {"image": "x", "network": "host", "network_mode": "none"}}'
    )
    open_try(page, console)
    typed(page, spec)
    wait_for(page, f"{CHECKED} === 'The gateway refuses this JobSpec:'", 30)
    refused = httpx.post(
        f"{console.url}/api/v2/compute/placement",
        content=spec,
        headers={"Authorization": f"Bearer {console.admin}", "Content-Type": "application/json"},
    )
    assert refused.status_code == 422
    expected = [
        [p["name"], p["name"], f"{p['name']}: {p['reason']}"]
        for p in refused.json()["invalid_params"]
    ]
    assert {name for name, _, _ in expected} == {"container", "cluster_lifecycle"}, expected
    assert problems(page) == expected
    assert page.find_element(By.ID, "problems-heading").text == ("The gateway refuses this JobSpec")


def test_every_example_passes_the_schema(page: WebDriver, console: Console) -> None:
    open_try(page, console)
    for name in EXAMPLES:
        page.find_element(By.CSS_SELECTOR, f"button[data-example='{name}']").click()
        wait_for(page, f"{CHECKED} === 'Checked.'", 30)
        assert page.find_element(By.ID, "problems").get_attribute("hidden") is not None, name
        assert page.find_element(By.ID, "schema-note").text == "", name
    documents = [
        json.loads((STATIC_DIR / f"example-{name}.json").read_text(encoding="utf-8"))
        for name in EXAMPLES
    ]
    assert in_browser(page, documents)["results"] == [
        {"errors": [], "unchecked": []} for _ in EXAMPLES
    ]


def test_a_hostile_field_name_stays_text(page: WebDriver, console: Console) -> None:
    hostile = "<img src=x onerror=\"document.title='owned'\">"
    open_try(page, console)
    typed(page, json.dumps({"executable": "/bin/echo", hostile: 1}))
    wait_for(page, f"{CHECKED} === {json.dumps(NOT_SENT)}", 20)
    assert problems(page) == [
        [hostile, hostile, f"{hostile}: unknown field; the JobSpec does not define it"]
    ]
    assert page.find_elements(By.CSS_SELECTOR, "#problems img") == []
    assert page.title != "owned"


# The browser's validator against Python's jsonschema, on the OpenAPI document's JobSpec.
DOCUMENTS: list[Any] = [
    {"executable": "/bin/echo", "arguments": ["hi"]},
    {"executable": "/bin/echo", "resources": {"node_count": 0}},
    {"executable": "/bin/echo", "resources": {"node_count": 2.5, "memory": None}},
    {"executable": "/bin/echo", "nmae": "x", "container_runtime": {"image": "x"}},
    {"container": {"image": "", "network": "bridge"}},
    {"container": 5, "arguments": "a b"},
    {"executable": "x", "roles": []},
    {
        "executable": "x",
        "roles": [{"name": "Worker1"}, {"name": "w", "count": 2, "ports": {"http": 70000}}],
    },
    {"executable": "x", "environment": {"K" * 300: "v", "OK": 1}},
    {"executable": "x", "roles": [{"name": "w", "count": 1, "ports": {"HTTP": 8000}}]},
    {
        "container": {
            "flavours": [{"name": "a", "image": "b", "requirements": [{"gpu_count": ">= 2"}, {}]}]
        }
    },
    {
        "container": {
            "image": "x",
            "flavours": [{"name": "-bad", "image": "b", "colour": 1, "requirements": {"x": [1]}}],
        }
    },
    [],
    {"executable": None, "template": "t", "cluster_lifecycle": "sometimes"},
]


def _types(root: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """The types a schema admits at its top, as the browser's validator reads them."""
    if "$ref" in schema:
        return _types(root, root["components"]["schemas"][schema["$ref"].split("/")[-1]])
    if "type" in schema:
        return [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
    return [
        t for branch in schema.get("anyOf", schema.get("oneOf", [])) for t in _types(root, branch)
    ]


def _admits(types: list[str], value: Any) -> bool:
    checker = Draft202012Validator.TYPE_CHECKER
    return any(checker.is_type(value, t) for t in types)


def _fields(root: dict[str, Any], error: ValidationError) -> Iterator[str]:
    """jsonschema's error at the field the gateway would name: a missing or unknown field and
    a bad field name at that field (jsonschema names the object holding it), an anyOf/oneOf
    by the one branch that admits the value's type (else at the value itself)."""
    path = list(error.absolute_path)
    schema_path = list(error.absolute_schema_path)
    rule: Any = error.validator_value
    instance: Any = error.instance
    if error.validator in ("anyOf", "oneOf") and error.context:
        fitting = [i for i, branch in enumerate(rule) if _admits(_types(root, branch), instance)]
        if len(fitting) == 1:
            for sub in error.context:
                if sub.relative_schema_path[0] == fitting[0]:
                    yield from _fields(root, sub)
            return
    if error.validator == "required":
        yield from (json_path([*path, name]) for name in rule if name not in instance)
    elif error.validator == "additionalProperties" and rule is False:
        schema: Any = error.schema
        known = schema.get("properties", {})
        yield from (json_path([*path, key]) for key in instance if key not in known)
    elif schema_path[-2:-1] == ["propertyNames"]:
        yield json_path([*path, error.instance])
    else:
        yield json_path(path)


def test_the_browser_validator_agrees_with_python_jsonschema(
    page: WebDriver, console: Console
) -> None:
    documents = DOCUMENTS + [
        json.loads((STATIC_DIR / f"example-{name}.json").read_text(encoding="utf-8"))
        for name in EXAMPLES
    ]
    open_try(page, console)
    found = in_browser(page, documents)
    root = {"$ref": REF, "components": {"schemas": found["schemas"]}}
    validator = Draft202012Validator(root)
    for document, result in zip(documents, found["results"], strict=True):
        expected = {
            name for error in validator.iter_errors(document) for name in _fields(root, error)
        }
        shown = {error["name"] for error in result["errors"]}
        assert shown == expected, (document, result["errors"])
        assert result["unchecked"] == [], result
    verdicts = [not result["errors"] for result in found["results"]]
    assert verdicts == [True] + [False] * (len(DOCUMENTS) - 1) + [True] * len(EXAMPLES)


def test_a_keyword_the_validator_does_not_implement_is_reported_not_passed(
    page: WebDriver, console: Console
) -> None:
    """pydantic once wrote its own `ge` into the schema instead of `minimum`: such a keyword
    is named with the field it guards, never taken as checked; so is a pattern in Python's
    syntax that JavaScript cannot compile."""
    root = {
        "components": {
            "schemas": {
                "JobSpec": {
                    "type": "object",
                    "properties": {
                        "count": {"type": "integer", "ge": 1},
                        "code": {"type": "string", "pattern": "^(?P<x>a)$"},
                    },
                }
            }
        }
    }
    open_try(page, console)
    result = page.execute_async_script(
        """
        const [root, done] = arguments;
        import("/console/static/jobspec-schema.js").then(
          (m) => done(m.validate(root, { count: 0, code: "b" })), (e) => done(String(e)));
    """,
        root,
    )
    assert result["errors"] == []
    assert sorted(result["unchecked"], key=lambda u: u["name"]) == [
        {
            "keyword": "pattern ^(?P<x>a)$ (not a JavaScript regular expression)",
            "name": "code",
            "path": ["code"],
        },
        {"keyword": "ge", "name": "count", "path": ["count"]},
    ]
