"""Every operation of OUR OpenAPI document, fuzzed by Schemathesis against a real `serve`.

The document is the one `iri-gateway openapi` exports (the live server's, built in-process
here so that the operations are known when the tests are collected); the server, its sandbox
(stand-in Slurm that runs nothing, jobs kept in a temporary folder) and the generation hooks
(ids the server knows next to generated ones) are those of `test_official_conformance`, whose
module docstring says why they are safe. All of Schemathesis's default checks run, status
code and response schema conformance included. Two of them, `positive_data_acceptance` and
`negative_data_rejection`, let a failure pass only when a rule of `checker_faults.EXCUSES`
excuses it as the checker's fault (each rule with its reason: a refusal the text prescribes,
a rule across fields JSON Schema cannot state, a documented 413 for a body grown past the
size limit, ...); the IRI harness's run (`test_iri_verification`) uses the same table.

Every operation of ours is run, every phase on each but the coverage phase on the three of
JOBSPEC_BEHIND_A_RESOURCE (its docstring says why and what runs instead).
`IRI_OWN_CONFORMANCE_EXAMPLES` (default 3) sets the fuzzing examples per operation,
`IRI_OWN_CONFORMANCE_JOB_EXAMPLES` (default 12) those of the three.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis import Case
from schemathesis.checks import CheckContext, negative_data_rejection, positive_data_acceptance
from schemathesis.config import SchemathesisConfig
from schemathesis.core.failures import Failure as SchemathesisFailure
from schemathesis.core.transport import Response

from iri_gateway.api.export import openapi_document
from tests.api import test_official_conformance as official
from tests.api.checker_faults import Failure, excuse_for, media_type, problem_parts
from tests.api.test_official_conformance import OFFICIAL_SCHEMAS, Server, sandbox_server
from tests.api.test_operation_compliance import ENDLESS

EXAMPLES = int(os.environ.get("IRI_OWN_CONFORMANCE_EXAMPLES", "3"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The official-conformance sandbox, whose generation hooks learn its ids."""
    with sandbox_server(tmp_path_factory) as served:
        yield served


Check = Callable[[CheckContext, Response, Case], bool | None]


DOCUMENT = json.loads(openapi_document())
OURS = sorted(
    operation["operationId"]
    for item in DOCUMENT["paths"].values()
    for operation in item.values()
    if isinstance(operation, dict) and operation["operationId"] not in ENDLESS
)
JOBSPEC_BEHIND_A_RESOURCE = ("launchJob", "planJob", "updateJob")
"""Operations that read their JobSpec body only once the path's resource (and job) is found.

Schemathesis's coverage phase varies one part of a request at a time and holds the others at
a fixed value; for these the fixed path names a resource the sandbox does not serve, so each
of some 1,600 body variations per operation got the same 404 from the resource lookup, which
runs before the body is read (measured: 4,867 of 4,902 cases 404, two of the run's five
minutes, their generation a quarter of its collection). These run the fuzzing phase only, with
JOB_EXAMPLES examples whose path parameters are, about half the time, the sandbox's resources
and jobs (the hooks), so that their bodies are read; the JobSpec's coverage cases run in full
on placeJob, which reads the same JobSpec with no path in front of it."""
JOB_EXAMPLES = max(EXAMPLES, int(os.environ.get("IRI_OWN_CONFORMANCE_JOB_EXAMPLES", "12")))


def flatmap_body(context: Any, body: Any) -> Any:
    """`test_official_conformance.flatmap_body` for the bodies that are official schemas
    (a runnable JobSpec, a job's file); the extensions' bodies as generated."""
    operation = context.operation
    content = (operation.definition.raw.get("requestBody") or {}).get("content", {})
    reference = content.get("application/json", {}).get("schema", {}).get("$ref", "")
    if reference.rsplit("/", 1)[-1] not in OFFICIAL_SCHEMAS.components["schemas"]:
        return st.just(body)
    return official.flatmap_body(context, body)


def _schema(operation_ids: list[str], config: SchemathesisConfig | None = None) -> Any:
    """Our document's operations `operation_ids`, with the generation hooks."""
    loaded = schemathesis.openapi.from_dict(DOCUMENT, config=config).include(
        operation_id=operation_ids
    )
    for hook in (official.flatmap_path_parameters, official.map_body, flatmap_body):
        loaded.hook(hook)
    return loaded


schema = _schema([o for o in OURS if o not in JOBSPEC_BEHIND_A_RESOURCE])
job_schema = _schema(
    list(JOBSPEC_BEHIND_A_RESOURCE),
    SchemathesisConfig.from_dict({"phases": {"coverage": {"enabled": False}}}),
)


def _failure(error: SchemathesisFailure, response: Response) -> Failure:
    """What `checker_faults` needs to judge a failed check."""
    try:
        body = response.json()
    except ValueError:
        body = None
    detail, params = problem_parts(body)
    return Failure(
        check=type(error).__name__,
        status=response.status_code,
        media_type=media_type(response.headers),
        detail=detail,
        invalid_params=params,
        message=str(error),
        token_forced=False,
    )


def _excusing(check: Check) -> Check:
    """`check`, with a failure that a rule of `checker_faults.EXCUSES` excuses let pass."""

    def excused(ctx: CheckContext, response: Response, case: Case) -> bool | None:
        try:
            return check(ctx, response, case)
        except SchemathesisFailure as error:
            if excuse_for(_failure(error, response)) is not None:
                return None
            raise

    excused.__name__ = f"{check.__name__}_unless_the_checkers_fault"
    return excused


valid_data_accepted = _excusing(positive_data_acceptance)
invalid_data_refused = _excusing(negative_data_rejection)


def _conforms(case: Case, gateway: Server) -> None:
    official._authorize(case, gateway)
    response = case.call_and_validate(
        base_url=gateway.base_url,
        excluded_checks=[positive_data_acceptance, negative_data_rejection],
        additional_checks=[valid_data_accepted, invalid_data_refused],
    )
    official._learn(gateway, case, response)


_SETTINGS: dict[str, Any] = {
    "deadline": None,
    "derandomize": True,
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
}


@schema.parametrize()
@settings(max_examples=EXAMPLES, **_SETTINGS)
def test_our_operation_conforms(case: Case, server: Server) -> None:
    _conforms(case, server)


@job_schema.parametrize()
@settings(max_examples=JOB_EXAMPLES, **_SETTINGS)
def test_our_job_operation_conforms(case: Case, server: Server) -> None:
    _conforms(case, server)
