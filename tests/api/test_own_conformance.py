"""Every operation of OUR OpenAPI document, fuzzed by Schemathesis against a real `serve`.

The document is the one `iri-gateway openapi` exports (the live server's, built in-process
here so that the operations are known when the tests are collected); the server, its sandbox
(stand-in Slurm that runs nothing, jobs kept in a temporary folder) and the generation hooks
(ids the server knows next to generated ones) are those of `test_official_conformance`, whose
module docstring says why they are safe. All of Schemathesis's default checks run, status
code and response schema conformance included, with two narrowed, each for one stated
reason:

- `negative_data_rejection`: its list of refusals lacks 413, and a schema-violating body
  Schemathesis makes by passing `maxLength`s and `maxItems` is above 100 MiB, which the
  server refuses, as documented for every operation with a body, with 413 Content Too Large
  before reading it (RFC 9110 section 15.5.14; a refusal, not an acceptance).

- `positive_data_acceptance`: a JobSpec the schema allows may still be refused, with a
  documented 400/422 problem naming each field at fault, because no JSON schema can say
  whether a job is runnable on a resource (a program to run, a known queue, fitting
  resources), or because the text prescribes it (the project in exactly one place, an
  `Idempotency-Key` reused with another body). The request validation of the gateway itself
  must take every request the schema allows, except the cross-field rules listed in
  `CROSS_FIELD_RULES`, each with its reason.

Every operation of ours is run. `IRI_OWN_CONFORMANCE_EXAMPLES` (default 3) sets the examples
per operation.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis import Case
from schemathesis.checks import CheckContext, negative_data_rejection, positive_data_acceptance
from schemathesis.core.failures import AcceptedNegativeData
from schemathesis.core.transport import Response
from schemathesis.openapi.checks import RejectedPositiveData

from iri_gateway.api.export import openapi_document
from tests.api import test_official_conformance as official
from tests.api.test_official_conformance import (  # noqa: F401  (the fixture)
    OFFICIAL_SCHEMAS,
    Server,
    server,
)

EXAMPLES = int(os.environ.get("IRI_OWN_CONFORMANCE_EXAMPLES", "3"))


DOCUMENT = json.loads(openapi_document())
OURS = sorted(
    operation["operationId"]
    for item in DOCUMENT["paths"].values() for operation in item.values()
    if isinstance(operation, dict)
)
schema = schemathesis.openapi.from_dict(DOCUMENT).include(operation_id=OURS)
schema.hook(official.flatmap_path_parameters)
schema.hook(official.map_body)


@schema.hook
def flatmap_body(context: Any, body: Any) -> Any:
    """`test_official_conformance.flatmap_body` for the bodies that are official schemas
    (a runnable JobSpec, a job's file); the extensions' bodies as generated."""
    operation = context.operation
    content = (operation.definition.raw.get("requestBody") or {}).get("content", {})
    reference = content.get("application/json", {}).get("schema", {}).get("$ref", "")
    if reference.rsplit("/", 1)[-1] not in OFFICIAL_SCHEMAS.components["schemas"]:
        return st.just(body)
    return official.flatmap_body(context, body)


CROSS_FIELD_RULES: dict[str, str] = {
    r"role [^:]+: min \d+ is above max \d+": "a cluster template role's `min` above its "
    "`max`: JSON Schema cannot compare one field with another",
    r"role [^:]+: count \d+ is outside min\.\.max \(\d+\.\.\d+\)": "a role's `count` "
    "outside its own `min`..`max`: the same",
    r"(role|flavour) names must be unique; given twice: .*": "roles (or flavours) with one "
    "name twice: JSON "
    "Schema's `uniqueItems` compares whole items, not one property of them",
    r"requirements\[\d+\]: fact .* is given twice": "a flavour's requirements naming one "
    "fact twice: the same, for one property of the items",
    r"requirement [^:]*: .*": "a flavour requirement's constraint is a small expression "
    "(`'>= 2'`, `'> 11'`) on a fact the resource may not know: a grammar, not a schema",
    r"image is required unless flavours are given": "a container's `image` required when "
    "its `flavours` are empty or absent: one field's presence depending on another's",
    r"cluster_lifecycle applies to jobs with roles only.*": "`cluster_lifecycle` without "
    "`roles`: one field's presence depending on another's",
    r".*: (unknown arm variant .*|arm64 has only the variant v8)": "a platform's variant "
    "depends on its arch (`arm/v7`, `arm64/v8`): one part of the string on another",
    r"role '[^']*': port '[^']*' \d+ with \d+ members reaches \d+ .*": "a role's port plus "
    "its member count past 65535 (member k listens on port + k - 1): one field's bound "
    "depending on another's value",
}
"""Refusals by the gateway's request validation of bodies our schema allows, each because
the rule relates two fields, which JSON Schema cannot express (the reason with each)."""


def valid_data_accepted_or_refused_for_a_stated_reason(
        ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """The official test's narrowed `positive_data_acceptance`, also taking a documented
    422 whose every reason is one of CROSS_FIELD_RULES."""
    try:
        return official.valid_data_accepted_or_refused_for_a_stated_reason(ctx, response, case)
    except RejectedPositiveData:
        body = response.json() if response.status_code == 422 else {}
        reasons = [p.get("reason", "") for p in body.get("invalid_params", [])]
        if reasons and all(any(re.fullmatch(rule, reason) for rule in CROSS_FIELD_RULES)
                           for reason in reasons):
            return None
        raise


def schema_violating_request_refused(ctx: CheckContext, response: Response,
                                     case: Case) -> bool | None:
    """`negative_data_rejection`, with a documented 413 problem counted as the refusal it
    is (see the module docstring)."""
    try:
        return negative_data_rejection(ctx, response, case)
    except AcceptedNegativeData:
        if (response.status_code == 413
                and case.operation.responses.find_by_status_code(413) is not None):
            return None
        raise


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                  HealthCheck.function_scoped_fixture])
def test_our_operation_conforms(case: Case, server: Server) -> None:  # noqa: F811
    official._authorize(case, server)
    response = case.call_and_validate(
        base_url=server.base_url,
        excluded_checks=[positive_data_acceptance, negative_data_rejection],
        additional_checks=[valid_data_accepted_or_refused_for_a_stated_reason,
                           schema_violating_request_refused],
    )
    official._learn(server, case, response)
