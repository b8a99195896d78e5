"""The IRI verification harness's Schemathesis run, in our own words: run by
`test_iri_verification.py` with pytest from each Schemathesis version's own Python (never
collected by the suite itself: its name does not start with `test_`).

What the harness (`verification/api-validator.py` of the IRI facility API docs repository)
does, and so what this does: load an OpenAPI document (the facility's `/openapi.json` or the
official spec), generate cases for every operation with the pytest integration
(`schema.parametrize()`), 20 examples and a 30 s deadline per operation by default, filter
health check off; before each call force `Accept: application/json`, make every header
printable ASCII, replace a path parameter that is not `[A-Za-z0-9._~-]+` by `1`, and send the
bearer token of `IRI_API_TOKEN` on every request; then validate the response with every
check except `content_type_conformance`, `unsupported_method` and `ignored_auth`.

Set by the caller: `IRI_HARNESS_BASE_URL`, `IRI_HARNESS_SCHEMA` (a URL or a file, JSON or
YAML), `IRI_HARNESS_OPERATIONS` (a JSON list: the operationIds kept; the harness keeps all,
the test keeps those the gateway serves), `IRI_HARNESS_MAX_EXAMPLES`, `IRI_API_TOKEN`, and
`IRI_HARNESS_FAILURES`, the file each failed check is appended to (and, in
`IRI_HARNESS_FAILURES.version`, the Schemathesis version that ran).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import urllib.request
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import schemathesis
import yaml
from hypothesis import HealthCheck, Phase, settings

BASE_URL = os.environ["IRI_HARNESS_BASE_URL"]
SOURCE = os.environ["IRI_HARNESS_SCHEMA"]
KEPT = set(json.loads(os.environ["IRI_HARNESS_OPERATIONS"]))
TOKEN = os.environ.get("IRI_API_TOKEN")
FAILURES = os.environ["IRI_HARNESS_FAILURES"]

# As the harness, except: derandomized (the same cases each run, so that a test can list
# what fails), no shrinking and no example database. A failure is then reported as first
# found, not minimised; which checks fail on which operation is the same, and the run stays
# short (shrinking a failure costs hundreds of requests).
settings.register_profile(
    "iri-harness",
    max_examples=int(os.environ.get("IRI_HARNESS_MAX_EXAMPLES", "20")),
    deadline=30000,
    suppress_health_check=[HealthCheck.filter_too_much],
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    database=None,
)
settings.load_profile("iri-harness")

PATH_VALUE = re.compile(r"^[A-Za-z0-9._~-]+$")


def _document(source: str) -> dict[str, Any]:
    if source.startswith(("http://", "https://")):
        with urllib.request.urlopen(source, timeout=30) as answer:
            text = answer.read().decode("utf-8")
    else:
        with open(source, encoding="utf-8") as stream:
            text = stream.read()
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def _only_kept(document: dict[str, Any]) -> dict[str, Any]:
    """The document with the operations whose operationId is not in KEPT removed."""
    paths: dict[str, Any] = {}
    for path, item in document.get("paths", {}).items():
        kept = {
            key: value
            for key, value in item.items()
            if not isinstance(value, dict)
            or "operationId" not in value
            or value["operationId"] in KEPT
        }
        if any(isinstance(v, dict) and "operationId" in v for v in kept.values()):
            paths[path] = kept
    return {**document, "paths": paths}


schema = schemathesis.openapi.from_dict(_only_kept(_document(SOURCE)))
with open(FAILURES + ".version", "w", encoding="utf-8") as _version:
    _version.write(importlib.metadata.version("schemathesis"))


def _printable(value: str) -> str:
    return "".join(c if 32 <= ord(c) <= 126 else "-" for c in value)


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: Any) -> None:
    """The harness's request clean-up and its bearer token (see the module docstring)."""
    for name, value in list((case.path_parameters or {}).items()):
        if isinstance(value, str) and not PATH_VALUE.fullmatch(value):
            case.path_parameters[name] = "1"
    headers = {"Accept": "application/json"}
    for name, value in (case.headers or {}).items():
        if isinstance(name, str):
            headers[_printable(name)] = _printable(value) if isinstance(value, str) else str(value)
    if TOKEN:
        headers["Authorization"] = f"Bearer {TOKEN}"
    case.headers = headers


def _problem(response: Any) -> dict[str, Any]:
    """The response body when it is a JSON object (a problem), else {}."""
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _content_type(response: Any) -> str:
    """The response's Content-Type (header values as strings or lists of strings)."""
    for name, value in dict(response.headers).items():
        if name.lower() == "content-type":
            return str(value[0] if isinstance(value, list) and value else value)
    return ""


def _query_names(response: Any) -> list[str]:
    """The names of the query parameters of the request as it was sent."""
    query = urlsplit(str(response.request.url)).query
    return sorted({name for name, _ in parse_qsl(query, keep_blank_values=True)})


def _record(label: str, response: Any, error: BaseException) -> None:
    """Each failed check as one JSON line (operation, check class, title, status, media
    type, and the problem's `detail` and `invalid_params`), for the test to read: the junit
    report of the pytest integration names no operation."""
    found = error.exceptions if isinstance(error, BaseExceptionGroup) else [error]
    problem = _problem(response)
    params = problem.get("invalid_params")
    with open(FAILURES, "a", encoding="utf-8") as stream:
        for failure in found:
            stream.write(
                json.dumps(
                    {
                        "operation": label,
                        "check": type(failure).__name__,
                        "title": str(getattr(failure, "title", failure)).splitlines()[0],
                        "status": response.status_code,
                        "content_type": _content_type(response),
                        "detail": problem.get("detail"),
                        "invalid_params": [
                            [p.get("name"), p.get("reason")] for p in params if isinstance(p, dict)
                        ]
                        if isinstance(params, list)
                        else [],
                        "message": str(failure)[:2000],
                        "query_sent": _query_names(response),
                    }
                )
                + "\n"
            )


@schema.parametrize()
def test_api(case: Any) -> None:
    """One operation: generated requests, each response validated."""
    response = case.call(base_url=BASE_URL, timeout=30)
    try:
        case.validate_response(
            response,
            excluded_checks=[
                schemathesis.checks.content_type_conformance,
                schemathesis.checks.unsupported_method,
                schemathesis.checks.ignored_auth,
            ],
        )
    except BaseException as error:  # a FailureGroup is a BaseExceptionGroup
        _record(case.operation.label, response, error)
        raise
