"""Read JobSpecs from JSON text, turning schema errors into field-path problems."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from iri_gateway.errors import InvalidJobSpecError, Problem, json_path
from iri_gateway.models.jobspec import JobSpec


def parse_jobspec(data: Any) -> JobSpec:
    """Validate a decoded JSON document as a JobSpec; InvalidJobSpecError lists every fault."""
    try:
        return JobSpec.model_validate(data)
    except ValidationError as error:
        problems = []
        for detail in error.errors():
            reason = str(detail["msg"]).removeprefix("Value error, ")
            if detail["type"] == "extra_forbidden":
                reason = "unknown field; the IRI JobSpec does not define it"
            problems.append(Problem(json_path(detail["loc"]), reason))
        raise InvalidJobSpecError(problems) from None


def load_jobspec_text(text: str) -> JobSpec:
    """Parse JSON text as a JobSpec; bad JSON is reported with its line and column."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidJobSpecError(
            [
                Problem(
                    "(document)",
                    f"not JSON: {error.msg} at line {error.lineno} column {error.colno}",
                )
            ]
        ) from None
    return parse_jobspec(data)
