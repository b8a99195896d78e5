"""The IRI project's verification harness, run as it runs, with both Schemathesis versions.

The harness (the `verification/` folder of the IRI facility API docs repository, see
`harness_run.py`) runs Schemathesis through pytest against a facility twice: against the
facility's own `/openapi.json` and against the official spec. Here the same run goes against
a real `iri-gateway serve`, once with Schemathesis 4.17.0 (the version behind the published
facility results; its own venv, `.venv-schemathesis-4.17`, made by `scripts/schemathesis-venv`,
which this test runs when the venv is missing) and once with the current release (the
project's `.venv`, pinned in pyproject's dev extras), each against both documents: four runs.
Each run keeps the operations the gateway serves, minus NOT_YET_SERVED
(test_operation_compliance); examples per operation: `IRI_VERIFICATION_EXAMPLES` (default 3,
to keep the four runs near three minutes on two cores).

The server is the official-conformance sandbox (test_official_conformance): stand-in Slurm
commands that only store a submitted script, no container runtime, its own HOME, working
directory and data directory, so generated JobSpecs never run.

Every failure must be excused by a rule of `checker_faults.EXCUSES` (the checker's own
faults, each with its reason; the table `test_own_conformance` uses too); any other failure
fails the test, with the harness's output. The runs are derandomized, so the same cases are
sent each time.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.api.checker_faults import Failure, excuse_for, media_type
from tests.api.conftest import OFFICIAL_SPEC
from tests.api.test_official_conformance import (
    DOWN,
    PROFILE,
    RESOURCE,
    _standin_slurm_bin,
    serve_sandbox,
)
from tests.api.test_operation_compliance import ENDLESS, NOT_YET_SERVED, operation_ids
from tests.conftest import UNHURRIED

ROOT = Path(__file__).resolve().parent.parent.parent
HARNESS = Path(__file__).with_name("harness_run.py")
OLD_VENV = ROOT / ".venv-schemathesis-4.17"
EXAMPLES = os.environ.get("IRI_VERIFICATION_EXAMPLES", "3")
VERSIONS = {"4.17.0": OLD_VENV / "bin" / "python", "current": Path(sys.executable)}
CURRENT = importlib.metadata.version("schemathesis")
"""The current release, as pinned in pyproject's dev extras and installed in `.venv`."""
STORAGE = """\
    storage:
      locations:
        - {logical_name: home, path: "/home/{account}"}
        - {logical_name: project, path: "/proj/{project}", shared: true}
      access_endpoints:
        - {id: dtn, protocol: globus, auth_type: globus, capabilities: [read],
           endpoint_id: 5e0cdbd2-3f1a-4e57-beed-b95c0bb83b7c, root_path: "/home/{user}"}
"""

Key = tuple[str, str, str, int]
"""(document: 'ours' or 'official', operation: 'METHOD /path', Schemathesis's check (its
failure class), the response status that failed it)."""


@dataclass(frozen=True)
class Recorded:
    """One failed check as `harness_run.py` recorded it."""

    document: str
    operation: str
    failure: Failure

    @property
    def key(self) -> Key:
        return (self.document, self.operation, self.failure.check, self.failure.status)


@dataclass(frozen=True)
class Sandbox:
    url: str
    token: str
    folder: Path


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """`iri-gateway serve` on the official-conformance sandbox, with a storage section."""
    folder = tmp_path_factory.mktemp("iri-verification")
    work = folder / "work"
    profile = folder / "sandbox.yaml"
    text = PROFILE.format(resource=RESOURCE, down=DOWN, work=work)
    text = text.replace(
        "    runtimes: {default: none}\n", "    runtimes: {default: none}\n" + STORAGE, 1
    )
    profile.write_text(text, encoding="utf-8")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("IRI_GATEWAY_")},
        "PATH": f"{_standin_slurm_bin(folder / 'bin')}{os.pathsep}{os.environ.get('PATH', '')}",
        "STANDIN_SLURM_STATE": str(folder / "slurm"),
        "HOME": str(folder),
        "XDG_DATA_HOME": str(folder),
        "IRI_GATEWAY_OUTAGES": json.dumps([DOWN]),
        **UNHURRIED,
    }
    with serve_sandbox(folder, profile, env) as (url, token):
        yield Sandbox(url, token, folder)


@pytest.fixture(scope="module")
def old_schemathesis() -> Path:
    """The 4.17.0 venv, made by scripts/schemathesis-venv when missing (failing loudly when it
    cannot be made)."""
    made = subprocess.run(
        [str(ROOT / "scripts" / "schemathesis-venv")], capture_output=True, text=True, timeout=600
    )
    assert made.returncode == 0, f"scripts/schemathesis-venv failed:\n{made.stderr}"
    return VERSIONS["4.17.0"]


def declared_query(source: str) -> dict[str, tuple[str, ...]]:
    """Per operation label (`GET /path`, as Schemathesis names it), the names of the query
    parameters the document at `source` (a URL or a file) declares, `$ref`s followed."""
    if source.startswith("http"):
        document = httpx.get(source, timeout=30).json()
    else:
        document = yaml.safe_load(Path(source).read_text(encoding="utf-8"))

    def resolved(parameter: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in parameter:
            node: Any = document
            for part in parameter["$ref"].removeprefix("#/").split("/"):
                node = node[part]
            parameter = node
        return parameter

    declared = {}
    for path, item in document["paths"].items():
        shared = item.get("parameters", [])
        for method, operation in item.items():
            if method == "parameters" or not isinstance(operation, dict):
                continue
            parameters = map(resolved, [*shared, *operation.get("parameters", [])])
            declared[f"{method.upper()} {path}"] = tuple(
                sorted(p["name"] for p in parameters if p.get("in") == "query")
            )
    return declared


def _failures(
    recorded: Path, document: str, declared: dict[str, tuple[str, ...]]
) -> list[Recorded]:
    """The failed checks `harness_run.py` recorded, with the query names each operation
    declares."""
    if not recorded.exists():
        return []
    return [
        Recorded(
            document,
            entry["operation"],
            Failure(
                check=entry["check"],
                status=entry["status"],
                media_type=media_type({"content-type": entry["content_type"]}),
                detail=entry["detail"],
                message=entry["message"],
                token_forced=True,
                query_sent=tuple(entry.get("query_sent") or ()),
                query_declared=declared.get(entry["operation"]),
                invalid_params=tuple(
                    (str(name or ""), str(reason or "")) for name, reason in entry["invalid_params"]
                ),
            ),
        )
        for entry in map(json.loads, recorded.read_text(encoding="utf-8").splitlines())
    ]


def _run(
    python: Path,
    sandbox: Sandbox,
    document: str,
    source: str,
    operations: list[str],
    out: Path,
    *,
    coverage: bool = False,
) -> tuple[list[Recorded], int, str, str]:
    ini = out / "pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    if python == VERSIONS["4.17.0"] and not coverage:
        # 4.17.0's coverage phase, run while collecting, enumerates negative combinations of
        # our JobSpec schemas for many minutes on two cores (over five measured, for one
        # operation); the current release runs it in seconds. Off for 4.17.0 only, through
        # the configuration file Schemathesis reads from the working directory.
        (out / "schemathesis.toml").write_text(
            "[phases.coverage]\nenabled = false\n", encoding="utf-8"
        )
    report, recorded = out / f"{document}.xml", out / f"{document}-failures.jsonl"
    env = {
        **os.environ,
        "IRI_HARNESS_BASE_URL": sandbox.url,
        "IRI_HARNESS_SCHEMA": source,
        "IRI_HARNESS_OPERATIONS": json.dumps(operations),
        "IRI_HARNESS_FAILURES": str(recorded),
        "IRI_HARNESS_MAX_EXAMPLES": EXAMPLES,
        "IRI_API_TOKEN": sandbox.token,
    }
    run = subprocess.run(
        [
            str(python),
            "-m",
            "pytest",
            str(HARNESS),
            "-c",
            str(ini),
            "--rootdir",
            str(out),
            "--noconftest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--tb=line",
            "-W",
            "ignore",
            f"--junitxml={report}",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=out,
        timeout=600,
    )
    assert report.exists(), f"the harness run wrote no report:\n{run.stdout}\n{run.stderr}"
    count = len(ET.parse(report).getroot().findall(".//testcase"))
    version = Path(f"{recorded}.version").read_text(encoding="utf-8")
    found = _failures(recorded, document, declared_query(source))
    return found, count, version, run.stdout[-6000:]


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_the_harness_finds_no_failures(
    version: str, sandbox: Sandbox, old_schemathesis: Path, tmp_path: Path
) -> None:
    python = VERSIONS[version]
    ours_document = httpx.get(f"{sandbox.url}/openapi.json", timeout=30).json()
    ours = operation_ids(ours_document)
    official = operation_ids(yaml.safe_load(OFFICIAL_SPEC.read_text(encoding="utf-8")))
    served = sorted(set(ours) - NOT_YET_SERVED - set(ENDLESS))
    runs = {
        "ours": (f"{sandbox.url}/openapi.json", served),
        "official": (str(OFFICIAL_SPEC), sorted(set(served) & set(official))),
    }
    failures: list[Recorded] = []
    outputs = []
    for document, (source, operations) in runs.items():
        folder = tmp_path / document
        folder.mkdir()
        found, count, ran, output = _run(python, sandbox, document, source, operations, folder)
        assert ran == (version if version != "current" else CURRENT), ran
        assert count == len(operations), (
            f"{version}/{document}: {count} operations run, {len(operations)} kept\n{output}"
        )
        failures += found
        outputs.append(output)
    unexpected = sorted(
        {failure.key for failure in failures if excuse_for(failure.failure) is None}
    )
    assert not unexpected, (
        f"Schemathesis {version}: failures not listed:\n"
        + "\n".join(map(str, unexpected))
        + "\n\n"
        + "\n".join(outputs)
    )


def test_the_harness_coverage_phase_finds_no_failures_where_queries_are_taken(
    sandbox: Sandbox, old_schemathesis: Path, tmp_path: Path
) -> None:
    """4.17.0 as the harness runs it, coverage phase on, against our OpenAPI, for every served
    operation that takes query parameters and no body (there the phase takes seconds; on the
    JobSpec bodies minutes, hence off in the test above). The phase sends each such operation
    an undefined query parameter and counts an answer other than a refusal as a failure
    (`AcceptedNegativeData`); the gateway refuses it with a 422 naming it, and no excuse
    covers it."""
    document = httpx.get(f"{sandbox.url}/openapi.json", timeout=30).json()
    operations = sorted(
        operation["operationId"]
        for item in document["paths"].values()
        for operation in item.values()
        if any(p["in"] == "query" for p in operation.get("parameters", []))
        and "requestBody" not in operation
        and operation["operationId"] not in NOT_YET_SERVED
        and operation["operationId"] not in ENDLESS
    )
    assert {
        "getSites",
        "getIncidents",
        "getEventsByIncident",
        "getCapabilities",
        "listMyJobs",
    } <= set(operations), operations
    found, count, ran, output = _run(
        VERSIONS["4.17.0"],
        sandbox,
        "ours",
        f"{sandbox.url}/openapi.json",
        operations,
        tmp_path,
        coverage=True,
    )
    assert ran == "4.17.0" and count == len(operations), output
    unexpected = sorted({failure.key for failure in found if excuse_for(failure.failure) is None})
    assert not unexpected, "\n".join(map(str, unexpected)) + "\n\n" + output
