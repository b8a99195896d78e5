"""Every operation of OUR OpenAPI document, fuzzed by Schemathesis against a real `serve`.

The document is the one `iri-gateway openapi` exports (the live server's, built in-process
here so that the operations are known when the tests are collected); the server, its sandbox
(stand-in Slurm that runs nothing, jobs kept in a temporary folder) and the generation hooks
(ids the server knows next to generated ones) are those of `test_official_conformance`, whose
module docstring says why they are safe. All of Schemathesis's default checks run, status
code and response schema conformance included, with one narrowed as there:

- `positive_data_acceptance`: a JobSpec the schema allows may still be refused, with a
  documented 400/422 problem naming each field at fault, because no JSON schema can say
  whether a job is runnable on a resource (a program to run, a known queue, fitting
  resources), or because the text prescribes it (the project in exactly one place, an
  `Idempotency-Key` reused with another body). The request validation of the gateway itself
  must take every request the schema allows.

Operations other engineers are adding in parallel (`ADDED_ELSEWHERE`) are left to their
own tests. `IRI_CONFORMANCE_EXAMPLES` (default 15) sets the examples per operation.
"""

from __future__ import annotations

import json

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case
from schemathesis.checks import positive_data_acceptance

from iri_gateway.api.export import openapi_document
from tests.api import test_official_conformance as official
from tests.api.test_official_conformance import (  # noqa: F401  (the fixture)
    EXAMPLES,
    Server,
    server,
)

ADDED_ELSEWHERE = (
    "checksum", "chmod", "chown", "compress", "cp", "download", "extract", "file", "mkdir",
    "mv", "rm", "symlink", "upload", "getComputeResources", "getFilesystemResources",
    "getStorageLocations", "getStorageAccessEndpoints",
)
"""The official operations other changes add, with their own conformance tests."""

DOCUMENT = json.loads(openapi_document())
OURS = sorted(
    operation["operationId"]
    for item in DOCUMENT["paths"].values() for operation in item.values()
    if isinstance(operation, dict) and operation.get("operationId") not in ADDED_ELSEWHERE
)
schema = schemathesis.openapi.from_dict(DOCUMENT).include(operation_id=OURS)
for hook in (official.flatmap_path_parameters, official.flatmap_body, official.map_body):
    schema.hook(hook)


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                  HealthCheck.function_scoped_fixture])
def test_our_operation_conforms(case: Case, server: Server) -> None:
    official._authorize(case, server)
    response = case.call_and_validate(
        base_url=server.base_url,
        excluded_checks=[positive_data_acceptance],
        additional_checks=[official.valid_data_accepted_or_refused_for_a_stated_reason],
    )
    official._learn(server, case, response)
