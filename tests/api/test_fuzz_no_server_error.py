"""Arbitrary JSON at a real `serve`: launchJob, plan, placement and the filesystem operations
never answer 5xx.

Bad input is the client's fault, never the server's: whatever a client posts (any JSON
value, JobSpec-shaped documents with hostile values in known fields, lone surrogates, huge
integers, deep nesting, bytes that are not JSON), the answer is a 2xx or a 4xx problem+json,
and the server is still answering afterwards. The schemathesis test fuzzes what the official
schema describes; this one fuzzes what it does not.

Safety, as in the official-conformance test: the server's Slurm commands are the stand-in
`standin_slurm.py` (a submitted script is only stored, nothing is run), and the server runs in
a sandbox folder that is its HOME, working directory and data directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.test_official_conformance import PROFILE, _standin_slurm_bin, serve_sandbox
from tests.conftest import UNHURRIED

RESOURCE, DOWN, USER, PROJECT = "sandbox", "sandbox-down", "fuzz", "proj1"
EXAMPLES = int(os.environ.get("IRI_FUZZ_EXAMPLES", "200"))
"""Generated documents per operation; raise it for a deeper run."""


@dataclass
class Sandboxed:
    base_url: str
    headers: dict[str, str]
    log: Path
    client: httpx.Client


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandboxed]:
    """`iri-gateway serve` with stand-in Slurm commands, in a sandbox folder."""
    sandbox = tmp_path_factory.mktemp("fuzz")
    work = sandbox / "work"
    profile = sandbox / "sandbox.yaml"
    profile.write_text(PROFILE.format(resource=RESOURCE, down=DOWN, work=work))
    env = {
        **os.environ,
        "PATH": f"{_standin_slurm_bin(sandbox / 'bin')}{os.pathsep}{os.environ.get('PATH', '')}",
        "STANDIN_SLURM_STATE": str(sandbox / "slurm"),
        "HOME": str(sandbox),
        "XDG_DATA_HOME": str(sandbox),
        **UNHURRIED,
    }
    with (
        serve_sandbox(sandbox, profile, env) as (url, token),
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "X-IRI-Facility-Project": PROJECT,
        }
        yield Sandboxed(url, headers, sandbox / "server.log", client)


# ---- what is posted ----------------------------------------------------------------------

# Text with everything a hostile client can put in JSON: lone surrogates (category Cs, which
# hypothesis leaves out by default), NUL and other control characters, and long strings.
hostile_text = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=40),
    st.sampled_from(
        [
            "\ud800",
            "a\udfffb",
            "\x00",
            "../../etc/passwd",
            "/etc/shadow",
            "-x",
            "$(id)",
            "`id`",
            "'\"",
            "\n#SBATCH --uid=0",
            "x" * 5000,
            "/" * 200_000,
        ]
    ),
)
numbers = st.one_of(
    st.integers(),
    st.integers(min_value=2**62, max_value=2**70),
    st.integers(max_value=-1),
    st.floats(allow_nan=False),
    st.just(1e9),
    st.just(1e308),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, hostile_text),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(hostile_text, inner, max_size=5)
    ),
    max_leaves=25,
)

JOBSPEC_FIELDS = (
    "executable",
    "arguments",
    "directory",
    "name",
    "inherit_environment",
    "environment",
    "stdin_path",
    "stdout_path",
    "stderr_path",
    "resources",
    "attributes",
    "pre_launch",
    "post_launch",
    "launcher",
    "container",
    "roles",
    "template",
)
NESTED = {
    "resources": (
        "node_count",
        "process_count",
        "processes_per_node",
        "cpu_cores_per_process",
        "gpu_cores_per_process",
        "exclusive_node_use",
        "memory",
    ),
    "attributes": ("duration", "queue_name", "account", "reservation_id", "custom_attributes"),
    "container": (
        "image",
        "volume_mounts",
        "runtime",
        "gpu",
        "mpi",
        "devices",
        "network",
        "workdir",
        "extra_options",
        "flavours",
    ),
}


def _shaped(keys: tuple[str, ...], values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({}, optional={key: values for key in keys})


strings = st.lists(hostile_text, max_size=5)
mapping = st.dictionaries(hostile_text, hostile_text, max_size=5)
TYPED = {
    # The shapes the models expect, with hostile values inside, so that documents get past
    # the first type check and reach the deeper code.
    "arguments": strings,
    "environment": mapping,
    "custom_attributes": mapping,
    "devices": strings,
    "node_count": numbers,
    "process_count": numbers,
    "processes_per_node": numbers,
    "cpu_cores_per_process": numbers,
    "gpu_cores_per_process": numbers,
    "duration": numbers,
    "memory": numbers,
    "volume_mounts": st.lists(
        st.fixed_dictionaries({"source": hostile_text, "target": hostile_text}), max_size=3
    ),
}


def _field_value(name: str) -> st.SearchStrategy[Any]:
    if name in NESTED:
        inner = st.fixed_dictionaries(
            {},
            optional={
                key: st.one_of(TYPED[key], json_values) if key in TYPED else json_values
                for key in NESTED[name]
            },
        )
        return st.one_of(json_values, inner)
    if name in TYPED:
        return st.one_of(TYPED[name], json_values)
    return json_values


VALID_JOB = {
    "executable": "/bin/true",
    "name": "fuzz",
    "attributes": {"duration": 60},
    "resources": {"node_count": 1, "process_count": 1},
}
hostile_fields = st.lists(
    st.sampled_from(JOBSPEC_FIELDS).flatmap(
        lambda name: st.tuples(st.just(name), _field_value(name))
    ),
    min_size=1,
    max_size=2,
)
# A valid job with one or two fields made hostile: a document wrong everywhere is refused at
# its first wrong field and never reaches the code behind it.
jobspec_shaped = hostile_fields.map(lambda fields: {**VALID_JOB, **dict(fields)})
documents = st.one_of(json_values, jobspec_shaped)
file_requests = st.one_of(
    json_values,
    _shaped(
        (
            "path",
            "bytes",
            "lines",
            "skipTrailing",
            "skipHeading",
            "size",
            "offset",
            "showHidden",
            "numericUid",
            "recursive",
            "dereference",
        ),
        json_values,
    ),
)
file_changes = st.one_of(
    json_values,
    _shaped(
        (
            "path",
            "target_path",
            "link_path",
            "mode",
            "owner",
            "group",
            "parent",
            "recursive",
            "dereference",
        ),
        json_values,
    ),
)


def _post(sandboxed: Sandboxed, path: str, document: Any) -> httpx.Response:
    # ensure_ascii: lone surrogates travel as \\udXXX escapes, as a JSON client sends them.
    body = json.dumps(document, ensure_ascii=True)
    return sandboxed.client.post(path, content=body, headers=sandboxed.headers)


def _assert_client_fault_at_most(response: httpx.Response, sandboxed: Sandboxed) -> None:
    assert response.status_code < 500, (
        f"{response.request.method} {response.request.url.path} -> {response.status_code}: "
        f"{response.text[:2000]}\nserver log tail:\n{sandboxed.log.read_text()[-3000:]}"
    )
    if response.status_code >= 400:
        assert response.headers["content-type"].startswith("application/problem+json"), (
            response.headers["content-type"],
            response.text[:500],
        )


_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@pytest.mark.parametrize(
    "path",
    [
        f"/api/v2/compute/job/{RESOURCE}",
        f"/api/v2/compute/plan/{RESOURCE}",
        "/api/v2/compute/placement",
    ],
)
@_SETTINGS
@given(document=documents)
def test_job_operations_never_answer_5xx(sandboxed: Sandboxed, path: str, document: Any) -> None:
    _assert_client_fault_at_most(_post(sandboxed, path, document), sandboxed)


TEMPLATE_FIELDS = (
    "description",
    "image",
    "executable",
    "arguments",
    "environment",
    "volume_mounts",
    "resources",
    "bootstrap",
    "roles",
)
template_documents = st.one_of(
    json_values,
    st.tuples(
        st.sampled_from(["task", "cluster"]),
        _shaped(TEMPLATE_FIELDS, json_values),
    ).map(lambda pair: {"kind": pair[0], **pair[1]}),
    st.tuples(
        st.just("cluster"),
        st.lists(
            _shaped(
                ("name", "task", "min", "max", "count"),
                st.one_of(numbers, hostile_text, json_values),
            ),
            max_size=3,
        ),
    ).map(lambda pair: {"kind": pair[0], "roles": pair[1]}),
)


@_SETTINGS
@given(
    document=template_documents,
    name=st.one_of(st.just("fuzz"), st.text(st.characters(), min_size=1, max_size=70)),
)
def test_template_writes_never_answer_5xx(sandboxed: Sandboxed, document: Any, name: str) -> None:
    from urllib.parse import quote

    # A lone surrogate has no UTF-8 form: it is sent as the bytes a careless client would
    # produce (surrogatepass), which the server must refuse as it refuses any bad name.
    path = f"/api/v2/compute/templates/{quote(name.encode('utf-8', 'surrogatepass'), safe='')}"
    body = json.dumps(document, ensure_ascii=True)
    response = sandboxed.client.put(path, content=body, headers=sandboxed.headers)
    _assert_client_fault_at_most(response, sandboxed)
    _assert_client_fault_at_most(sandboxed.client.get(path, headers=sandboxed.headers), sandboxed)


@pytest.mark.parametrize("operation", ["ls", "head", "tail", "view", "stat"])
@_SETTINGS
@given(document=file_requests)
def test_filesystem_reads_never_answer_5xx(
    sandboxed: Sandboxed, operation: str, document: Any
) -> None:
    response = _post(sandboxed, f"/api/v2/filesystem/{operation}/{RESOURCE}", document)
    _assert_client_fault_at_most(response, sandboxed)


@pytest.mark.parametrize(
    "operation", ["mkdir", "rm", "mv", "cp", "chmod", "chown", "symlink", "file", "checksum"]
)
@_SETTINGS
@given(document=file_changes)
def test_filesystem_changes_never_answer_5xx(
    sandboxed: Sandboxed, operation: str, document: Any
) -> None:
    response = _post(sandboxed, f"/api/v2/filesystem/{operation}/{RESOURCE}", document)
    _assert_client_fault_at_most(response, sandboxed)


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"\xff\xfe",
        b'{"executable": "\\ud800"',
        b"[" * 100_000,
        b"null",
        b"",
        b'{"executable": "/bin/true", "arguments": ["' + b"\\ud83d" * 1000 + b'"]}',
    ],
)
def test_bytes_that_are_not_a_json_document_are_refused(sandboxed: Sandboxed, body: bytes) -> None:
    for path in (f"/api/v2/compute/job/{RESOURCE}", f"/api/v2/filesystem/head/{RESOURCE}"):
        response = sandboxed.client.post(path, content=body, headers=sandboxed.headers)
        _assert_client_fault_at_most(response, sandboxed)
        assert response.status_code >= 400


@pytest.mark.parametrize("raw", ["%ED%A0%80", "%FF", "%00", "a%2Fb", ".."])
def test_template_names_that_are_not_names_are_refused(sandboxed: Sandboxed, raw: str) -> None:
    """Bytes that are no UTF-8 (a lone surrogate's CESU bytes, 0xFF), NUL, a slash, `..`."""
    path = f"/api/v2/compute/templates/{raw}"
    for response in (
        sandboxed.client.put(
            path, content=b'{"kind": "task", "image": "x"}', headers=sandboxed.headers
        ),
        sandboxed.client.get(path, headers=sandboxed.headers),
    ):
        _assert_client_fault_at_most(response, sandboxed)
        assert 400 <= response.status_code < 500, (raw, response.status_code, response.text)
