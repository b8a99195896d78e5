"""Every official operation the gateway serves, fuzzed against the OFFICIAL IRI Facility API v2.

Schemathesis loads `openapi/official/iri-facility-api-v2.openapi.yaml`, keeps the operations
whose operationId the gateway's own OpenAPI document also has (`test_compliance.IMPLEMENTED`,
the same intersection the compliance test checks, so a newly served official operation is
fuzzed at once), and sends generated requests, valid and invalid, to a real `iri-gateway
serve` process. Every response must pass schemathesis's checks: no server error; the status
code, headers, content type and body the official spec documents; invalid data refused;
valid data accepted. `IRI_CONFORMANCE_EXAMPLES` (default 15) sets the examples per operation.

Two built-in checks are replaced by narrower versions of themselves, each for one stated
reason, and nothing else is excused:

- `content_type_conformance`: docs/design.md Contract 2 answers errors as
  `application/problem+json` (RFC 9457, with `invalid_params`) where the official spec
  documents `application/json` carrying its `Problem` schema. `problem_json_conformance`
  is the same check for every other response, and validates such an error body against the
  official schema documented for `application/json` (which the built-in checks would skip).
- `positive_data_acceptance`: the official text itself prescribes refusing requests its
  schemas allow: 400 when the project is given in both or neither of `attributes.account`
  and `X-IRI-Facility-Project`, 422 when an `Idempotency-Key` is reused with another body;
  and an accepted JobSpec must still be runnable on the resource (a program or an image to
  run, a known queue, fitting resources...), which no JSON schema can say. A schema-valid
  request may therefore be refused only with a documented 400/422 problem naming each field
  at fault in `invalid_params`, and never by the gateway's request validation (its models
  must take every official request: docs/design.md Contract 1).

Safety: generated JobSpecs are really submitted, so the server must not run them. The server
gets a profile of its own whose resources are Slurm resources reached locally, and a PATH
whose `sbatch`, `squeue`, `scancel` and `scontrol` are `standin_slurm.py`, which only stores the
script; no generated executable, `pre_launch`/`post_launch` or output path is ever executed.
The resources have no container runtime, so a container job is refused before any image is
staged (pulled). The gateway itself creates a job's `directory` (as the test's user) before
submitting: generated directories are made relative and stripped of `..`, and the server's
working directory, HOME and data directory are the run's temporary folder. Nothing else of
the host is touched.
"""

from __future__ import annotations

import json
import os
import posixpath
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from schemathesis import Case
from schemathesis.checks import (
    CheckContext,
    content_type_conformance,
    positive_data_acceptance,
)
from schemathesis.core.transport import Response
from schemathesis.openapi.checks import RejectedPositiveData

from iri_gateway.api.filesystem import read_models as filesystem_models
from iri_gateway.api.plumbing.problems import REQUEST_NOT_VALID
from tests.api.conftest import OFFICIAL_SPEC, OfficialSchemas
from tests.api.test_compliance import IMPLEMENTED
from tests.conftest import UNHURRIED
from tests.support.paths import STANDINS
from tests.support.serve import issue_token, running_serve

EXAMPLES = int(os.environ.get("IRI_CONFORMANCE_EXAMPLES", "15"))
"""Generated examples per operation and phase; raise it for a deeper run."""
PROBLEM_JSON = "application/problem+json"
USER, PROJECT = "alice", "proj1"
RESOURCE, DOWN = "sandbox", "sandbox-down"
STANDIN_SLURM = STANDINS / "standin_slurm.py"
SLURM_COMMANDS = ("sbatch", "squeue", "scancel", "scontrol")

PROFILE = """\
facility:
  id: sandbox-site
  name: Sandbox site
  description: Two stand-in Slurm resources of the official-conformance test.
resources:
  - id: {resource}
    name: Sandbox cluster
    scheduler: {{kind: slurm, history: none, allowed_custom_attributes: [comment]}}
    connection: {{mode: local, work_root: {work}}}
    queues:
      - {{name: debug, default: true, max_walltime: 3600, max_nodes: 2}}
      - {{name: long, max_walltime: 86400}}
    nodes:
      count: 2
      cpu: {{arch: x86_64, cores: 4}}
      memory_gib: 8
    mpi: {{flavour: mpich, launcher: srun}}
    runtimes: {{default: none}}
  - id: {down}
    name: Sandbox cluster under a declared outage
    scheduler: {{kind: slurm, history: none}}
    connection: {{mode: local, work_root: {work}}}
    queues: [{{name: debug, default: true}}]
    nodes:
      count: 1
      cpu: {{arch: x86_64, cores: 4}}
      memory_gib: 8
    runtimes: {{default: none}}
"""

schema = schemathesis.openapi.from_path(OFFICIAL_SPEC).include(operation_id=IMPLEMENTED)
OFFICIAL_SCHEMAS = OfficialSchemas(yaml.safe_load(OFFICIAL_SPEC.read_text(encoding="utf-8")))


class Server:
    """The running gateway, its sandbox, and ids learned from its answers."""

    def __init__(self, base_url: str, token: str, sandbox: Path) -> None:
        self.base_url, self.token, self.sandbox = base_url, token, sandbox
        self.jobs: list[tuple[str, str]] = []
        """(resource id, job id) of every job launched."""
        self.task_ids: list[str] = []
        self.paths: list[str] = []


SERVER: Server | None = None
"""Set by the `server` fixture; the generation hooks below read the ids it has learned."""


def _standin_slurm_bin(folder: Path) -> Path:
    folder.mkdir()
    for command in SLURM_COMMANDS:
        stub = folder / command
        stub.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN_SLURM}" {command} "$@"\n')
        stub.chmod(0o755)
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`iri-gateway serve` on a free loopback port, in a sandbox (see the module docstring)."""
    with sandbox_server(tmp_path_factory) as served:
        yield served


@contextmanager
def sandbox_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The sandbox's server, known to the generation hooks below (`SERVER`) while it runs;
    test_own_conformance's `server` fixture is this too."""
    global SERVER
    sandbox = tmp_path_factory.mktemp("official-conformance")
    work = sandbox / "work"
    profile = sandbox / "sandbox.yaml"
    profile.write_text(PROFILE.format(resource=RESOURCE, down=DOWN, work=work))
    env = {
        **os.environ,
        "PATH": f"{_standin_slurm_bin(sandbox / 'bin')}{os.pathsep}{os.environ.get('PATH', '')}",
        "STANDIN_SLURM_STATE": str(sandbox / "slurm"),
        "HOME": str(sandbox),
        "XDG_DATA_HOME": str(sandbox),
        "IRI_GATEWAY_OUTAGES": json.dumps([DOWN]),
        "IRI_GATEWAY_POLL_FAST": "0.2",
        **UNHURRIED,
    }
    try:
        with serve_sandbox(sandbox, profile, env) as (url, token):
            SERVER = Server(url, token, sandbox)
            yield SERVER
    finally:
        SERVER = None


@contextmanager
def serve_sandbox(folder: Path, profile: Path, env: dict[str, str]) -> Iterator[tuple[str, str]]:
    """`iri-gateway serve` of PROFILE run in the sandbox FOLDER (its working directory, its
    data in `data/`, its output in `server.log`) with the environment ENV (whole, not
    cleaned), and a token for USER: the official-conformance, fuzzing and IRI-verification
    sandboxes."""
    data = folder / "data"
    token = issue_token(data, USER, PROJECT, base_env=env, cwd=folder)
    with running_serve(
        data,
        args=("--profiles", str(profile)),
        base_env=env,
        log=folder / "server.log",
        cwd=folder,
    ) as served:
        yield served.url, token


# ---- generation: known ids next to generated ones, directories kept in the sandbox ----------


def _known(name: str) -> list[str]:
    """Ids the server knows for a path parameter `name`, so that found objects are fuzzed too."""
    server = SERVER
    static = {
        "resource_id": [RESOURCE, DOWN],
        "site_id": ["sandbox-site"],
        "capability_id": [RESOURCE],
        "project_id": [PROJECT],
        "project_allocation_id": [f"{PROJECT}:{RESOURCE}"],
        "user_allocation_id": [f"{PROJECT}:{RESOURCE}:{USER}"],
        "incident_id": [f"outage-{DOWN}"],
        "event_id": [f"outage-{DOWN}-declared"],
    }
    if name == "job_id":
        return [job_id for _, job_id in server.jobs] if server else []
    if name == "task_id":
        return list(server.task_ids) if server else []
    return static.get(name, [])


@schema.hook
def flatmap_path_parameters(context: Any, parameters: dict[str, Any] | None) -> Any:
    """The generated path parameters; each one, as often, replaced by an id the server knows;
    or, as often again, a job of the test's user with its resource."""
    if not parameters:
        return st.just(parameters)
    mixed = st.fixed_dictionaries(
        {
            name: st.sampled_from([value, *known]) if (known := _known(name)) else st.just(value)
            for name, value in parameters.items()
        }
    )
    jobs = SERVER.jobs if SERVER is not None and "job_id" in parameters else []
    if not jobs:
        return mixed
    return st.one_of(
        mixed,
        st.sampled_from(list(jobs)).map(
            lambda job: {**parameters, "resource_id": job[0], "job_id": job[1]}
        ),
    )


def _inside_sandbox(directory: str) -> str:
    """`directory` made relative, without `..`: the server resolves it in its working
    directory, the sandbox (hooks also run while collecting, before the server starts)."""
    parts = [p for p in directory.split("/") if p not in ("", ".", "..")]
    return posixpath.join("jobdirs", *parts)


def _operation_id(context: Any) -> str | None:
    operation = context.operation
    return operation.definition.raw.get("operationId") if operation is not None else None


def _runnable(spec: dict[str, Any]) -> dict[str, Any]:
    """A JobSpec the sandbox resource accepts, keeping the generated `arguments` and
    `pre_launch`: random JobSpecs almost never name a program, a known queue and fitting
    resources, and the accepted ones are those whose answer is an official `Job`."""
    runnable: dict[str, Any] = {
        "executable": "iri-conformance-no-such-program",
        "name": "conformance",
        "attributes": {"duration": 60, "queue_name": "debug"},
        "resources": {"node_count": 1, "process_count": 1},
    }
    for field in ("arguments", "pre_launch", "inherit_environment"):
        if field in spec:
            runnable[field] = spec[field]
    if spec.get("directory"):
        runnable["directory"] = "jobdirs/runnable"
    return runnable


def _valid_official_body(context: Any, body: dict[str, Any]) -> bool:
    """True when `body` is valid against the official request schema of the operation."""
    operation = context.operation
    if operation is None:
        return False
    content = (operation.definition.raw.get("requestBody") or {}).get("content", {})
    reference = content.get("application/json", {}).get("schema", {}).get("$ref", "")
    name = reference.rsplit("/", 1)[-1]
    return bool(name) and OFFICIAL_SCHEMAS.validator(name).is_valid(body)


@schema.hook
def flatmap_body(context: Any, body: Any) -> Any:
    """As often as the generated body: a runnable JobSpec (launchJob, updateJob), or a
    filesystem `path` that names a file or folder of a job."""
    # Only in place of a valid body: an invalid one is there to be refused.
    if not (isinstance(body, dict) and _valid_official_body(context, body)):
        return st.just(body)
    if _operation_id(context) in ("launchJob", "updateJob"):
        return st.sampled_from([body, _runnable(body)])
    known = SERVER.paths if SERVER is not None else []
    if isinstance(body.get("path"), str) and known:
        return st.one_of(
            st.just(body), st.sampled_from(list(known)).map(lambda path: {**body, "path": path})
        )
    return st.just(body)


@schema.hook
def map_body(context: Any, body: Any) -> Any:
    """Job directories (which the gateway creates) stay in the sandbox."""
    if (
        _operation_id(context) == "launchJob"
        and isinstance(body, dict)
        and isinstance(body.get("directory"), str)
        and body["directory"]
    ):
        return {**body, "directory": _inside_sandbox(body["directory"])}
    return body


# ---- the replaced checks ---------------------------------------------------------------------


def _media_type(response: Response) -> str:
    values = response.headers.get("content-type") or [""]
    return values[0].split(";", 1)[0].strip().lower()


def problem_json_conformance(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """`content_type_conformance`, except that an error may be `application/problem+json`
    where the official spec documents `application/json` (docs/design.md Contract 2); such an
    error body is then validated against the schema documented for `application/json`."""
    if _media_type(response) != PROBLEM_JSON or response.status_code < 400:
        return content_type_conformance(ctx, response, case)
    documented = case.operation.schema.get_content_types(case.operation, response)
    if documented and "application/json" not in documented:
        return content_type_conformance(ctx, response, case)
    headers = {**response.headers, "content-type": ["application/json"]}
    as_json = Response(
        status_code=response.status_code,
        headers=headers,
        content=response.content,
        request=response.request,
        elapsed=response.elapsed,
        verify=response.verify,
        message=response.message,
        http_version=response.http_version,
        encoding=response.encoding,
    )
    content_type_conformance(ctx, as_json, case)
    return case.operation.validate_response(as_json, case=case)


def _authorize(case: Case, server: Server) -> None:
    """The bearer token of the test's user, as a schemathesis auth provider would set it:
    on every case except those generated to go without valid credentials; and the
    forwarded project where the official text needs it (`_project_header`)."""
    headers = dict(case.headers or {})
    if not case.operation.schema.is_security_param_negated(case):
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers["Authorization"] = f"Bearer {server.token}"
    case.headers = {**headers, **_project_header(case)}


def _project_header(case: Case) -> dict[str, str]:
    """The forwarded project when the JobSpec names no account.

    The official launchJob/updateJob text requires the project in exactly one place,
    `attributes.account` or the `X-IRI-Facility-Project` header, and 400 otherwise; the
    official schema cannot say so (and does not declare the header), so a generated request
    gets the header exactly when its body, if a JobSpec, names no account.
    """
    if case.operation.definition.raw.get("operationId") not in ("launchJob", "updateJob"):
        return {}
    body = case.body if isinstance(case.body, dict) else None
    attributes = body.get("attributes") if body is not None else None
    if isinstance(attributes, dict) and attributes.get("account") is not None:
        return {}
    return {"X-IRI-Facility-Project": PROJECT}


def _refused_for_a_stated_reason(case: Case, response: Response) -> bool:
    """A 400 or 422 the operation documents, as a problem naming each field at fault, that
    is not the gateway's request validation (whose models must take all official data)."""
    if response.status_code not in (400, 422) or _media_type(response) != PROBLEM_JSON:
        return False
    if case.operation.responses.find_by_status_code(response.status_code) is None:
        return False
    body = response.json()
    params = body.get("invalid_params") if isinstance(body, dict) else None
    return (
        body.get("detail") != REQUEST_NOT_VALID
        and isinstance(params, list)
        and bool(params)
        and all(
            isinstance(p, dict)
            and isinstance(p.get("name"), str)
            and isinstance(p.get("reason"), str)
            and p["reason"]
            for p in params
        )
    )


def valid_data_accepted_or_refused_for_a_stated_reason(
    ctx: CheckContext, response: Response, case: Case
) -> bool | None:
    """`positive_data_acceptance`, except for a refusal the official text itself prescribes
    of requests its schemas allow (see the module docstring)."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        if _refused_for_a_stated_reason(case, response):
            return None
        raise


def _learn(server: Server, case: Case, response: Response) -> None:
    """Remember the ids of jobs and tasks the server created, for later path parameters."""
    if response.status_code >= 300 or not response.content:
        return
    body = response.json()
    operation_id = case.operation.definition.raw.get("operationId")
    if operation_id == "launchJob" and isinstance(body, dict) and "id" in body:
        job_id = str(body["id"])
        server.jobs.append((str(case.path_parameters["resource_id"]), job_id))
        spec = case.body if isinstance(case.body, dict) else {}
        if not spec.get("directory"):
            # What the job would have written (the stand-in Slurm runs nothing): its own folder,
            # made by the gateway under the work root, gets an output file.
            folder = server.sandbox / "work" / job_id
            (folder / "stdout.txt").write_text("".join(f"line {n}\n" for n in range(1, 30)))
            server.paths += [job_id, f"{job_id}/stdout.txt", str(folder / "stdout.txt")]
    elif isinstance(body, dict) and isinstance(body.get("task_id"), str):
        server.task_ids.append(body["task_id"])


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
)
def test_official_operation_conforms(case: Case, server: Server) -> None:
    _authorize(case, server)
    response = case.call_and_validate(
        base_url=server.base_url,
        # Each excluded check runs in a narrower form (see the module docstring): docs/design.md
        # Contract 2's problem+json errors where the official spec documents application/json;
        # refusals of schema-valid requests that the official text prescribes.
        excluded_checks=[content_type_conformance, positive_data_acceptance],
        additional_checks=[
            problem_json_conformance,
            valid_data_accepted_or_refused_for_a_stated_reason,
        ],
    )
    _learn(server, case, response)


def test_the_fuzzed_operations_are_the_served_official_ones(server: Server) -> None:
    """The live server's own OpenAPI document serves every fuzzed official operation."""
    document = httpx.get(f"{server.base_url}/openapi.json", timeout=10).json()
    served = {
        operation["operationId"]
        for item in document["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    }
    fuzzed = {
        operation.definition.raw["operationId"]
        for operation in (r.ok() for r in schema.get_all_operations())
    }
    assert fuzzed == set(IMPLEMENTED)
    assert fuzzed <= served


@pytest.mark.parametrize(
    ("operation_id", "body"),
    [
        ("tail", {"path": "stdout.txt", "lines": True}),
        ("head", {"path": "stdout.txt", "bytes": "5"}),
        ("ls", {"path": ".", "showHidden": "yes"}),
        ("stat", {"path": ".", "dereference": 1}),
        ("view", {"path": "stdout.txt", "size": "10"}),
    ],
)
def test_filesystem_bodies_refuse_wrong_types(operation_id: str, body: dict[str, Any]) -> None:
    """The official schema refuses these bodies (wrong types); the gateway's models do too."""
    models: dict[str, type[BaseModel]] = {
        "ls": filesystem_models.PostLsRequest,
        "head": filesystem_models.PostHeadRequest,
        "tail": filesystem_models.PostTailRequest,
        "view": filesystem_models.PostViewRequest,
        "stat": filesystem_models.PostStatRequest,
    }
    model = models[operation_id]
    assert not OFFICIAL_SCHEMAS.validator(model.__name__).is_valid(body)
    with pytest.raises(ValidationError):
        model.model_validate_json(json.dumps(body))


# ---- what the run found, pinned ------------------------------------------------------------------


def _auth(server: Server) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token}"}


def test_405_allows_every_method_of_the_path(server: Server) -> None:
    """`Allow` named only the first matching route's method (GET of /task/{id}, not DELETE)."""
    answer = httpx.request("OPTIONS", f"{server.base_url}/api/v2/task/x", headers=_auth(server))
    assert answer.status_code == 405
    assert answer.headers["allow"] == "GET, HEAD, DELETE"
    answer = httpx.patch(f"{server.base_url}/api/v2/compute/job/{RESOURCE}/x")
    assert (answer.status_code, answer.headers["allow"]) == (405, "PUT")


def test_reused_idempotency_key_names_the_header(server: Server) -> None:
    """The official 422 for a key reused with another body names the field at fault."""
    url = f"{server.base_url}/api/v2/compute/job/{RESOURCE}"
    headers = {
        **_auth(server),
        "Idempotency-Key": "conformance-reused",
        "X-IRI-Facility-Project": PROJECT,
    }
    job = {"executable": "iri-conformance-no-such-program", "name": "first"}
    assert httpx.post(url, json=job, headers=headers).status_code == 200
    again = httpx.post(url, json={**job, "name": "second"}, headers=headers)
    assert again.status_code == 422
    assert [p["name"] for p in again.json()["invalid_params"]] == ["Idempotency-Key"]


def _updates(server: Server) -> list[str]:
    """Every update the stand-in Slurm was told, in order."""
    return [
        line
        for file in sorted((server.sandbox / "slurm").glob("*.updates"))
        for line in file.read_text().splitlines()
    ]


def test_update_honours_the_idempotency_key(server: Server) -> None:
    """updateJob ignored `Idempotency-Key`: a retry told the scheduler twice. Now the same
    key and body answer the job without a second update; another body is a 422 naming the
    header; the key is the caller's own (another job's update with it is another request)."""
    headers = {**_auth(server), "X-IRI-Facility-Project": PROJECT}
    base = f"{server.base_url}/api/v2/compute/job/{RESOURCE}"
    job = httpx.post(
        base, headers=headers, json={"executable": "iri-conformance-no-such-program"}
    ).json()
    assert job["status"]["state"] == "queued", job
    keyed = {**headers, "Idempotency-Key": "update-once"}
    before = len(_updates(server))
    first = httpx.put(f"{base}/{job['id']}", headers=keyed, json={"name": "renamed"})
    assert first.status_code == 200, first.text
    assert first.headers["Idempotency-Key-Reply"] == "miss"
    assert len(_updates(server)) == before + 1
    again = httpx.put(f"{base}/{job['id']}", headers=keyed, json={"name": "renamed"})
    assert again.status_code == 200, again.text
    assert (again.headers["Idempotency-Key-Reply"], again.json()["id"]) == ("hit", job["id"])
    assert len(_updates(server)) == before + 1, "a retry told the scheduler again"
    other = httpx.put(f"{base}/{job['id']}", headers=keyed, json={"name": "other"})
    assert other.status_code == 422
    assert [p["name"] for p in other.json()["invalid_params"]] == ["Idempotency-Key"]
    unkeyed = httpx.put(f"{base}/{job['id']}", headers=headers, json={"name": "renamed"})
    assert unkeyed.status_code == 200
    assert len(_updates(server)) == before + 2, "without a key every update is sent"


def test_job_list_offset_beyond_sql_range_is_an_empty_page(server: Server) -> None:
    """The official offset has no maximum; one past SQL's 64-bit OFFSET was a 500."""
    answer = httpx.post(
        f"{server.base_url}/api/v2/compute/status/{RESOURCE}",
        params={"offset": str(2**70), "historical": "true"},
        headers=_auth(server),
    )
    assert (answer.status_code, answer.json()) == (200, [])


@pytest.mark.parametrize(
    ("value", "status"),
    [
        ("true", 200),
        ("FALSE", 200),
        (" True ", 200),
        ("1", 422),
        ("yes", 422),
        ("on", 422),
        ("t", 422),
        ("0", 422),
    ],
)
def test_query_booleans_are_strict(server: Server, value: str, status: int) -> None:
    """'Strict boolean. Only true/false allowed', as the official reference reads it."""
    answer = httpx.post(
        f"{server.base_url}/api/v2/compute/status/{RESOURCE}",
        params={"historical": value},
        headers=_auth(server),
    )
    assert answer.status_code == status
    if status == 422:
        assert answer.json()["invalid_params"][0]["name"] == "query.historical"


@pytest.mark.parametrize(
    ("attributes", "field"),
    [
        ({"queue_name": "de\u0000bug"}, "attributes.queue_name"),
        ({"queue_name": "no-such-queue"}, "attributes.queue_name"),
        ({"duration": 10**6}, "attributes.duration"),
    ],
)
def test_update_is_checked_like_a_submission(
    server: Server, attributes: dict[str, Any], field: str
) -> None:
    """A NUL in the queue reached scontrol's argv: 500. An update must leave a job the
    resource accepts, or be refused with the field at fault."""
    headers = {**_auth(server), "X-IRI-Facility-Project": PROJECT}
    job = httpx.post(
        f"{server.base_url}/api/v2/compute/job/{RESOURCE}",
        headers=headers,
        json={"executable": "iri-conformance-no-such-program"},
    ).json()
    answer = httpx.put(
        f"{server.base_url}/api/v2/compute/job/{RESOURCE}/{job['id']}",
        headers=headers,
        json={"attributes": attributes},
    )
    assert answer.status_code == 422
    assert field in [p["name"] for p in answer.json()["invalid_params"]]


def test_a_single_valued_query_parameter_given_twice_is_refused(server: Server) -> None:
    """`?offset=abc&offset=0` was read as offset 0: FastAPI keeps the last value."""
    answer = httpx.get(
        f"{server.base_url}/api/v2/account/capabilities",
        params=[("offset", "abc"), ("offset", "0")],
    )
    assert answer.status_code == 422
    assert [p["name"] for p in answer.json()["invalid_params"]] == ["query.offset"]
