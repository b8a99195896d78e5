"""The real qsub of OpenPBS 23.06.06 behind each `#PBS` rule of the PBS plug-in
(schedulers/pbs/directive_rules.py): what the gateway refuses, qsub refuses or misreads; what
it writes, qsub reads back exactly. Every job is submitted held (`-h`), read with
`qstat -f -F json` and deleted: none runs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.schedulers.pbs.directive_rules import PbsDirectiveRules
from tests.conftest import plan_for
from tests.integration.conftest import PbsInfo

pytestmark = pytest.mark.integration

RULES = PbsDirectiveRules()


class HeldJobs:
    """qsub of a few `#PBS` lines, the job held; every job made is deleted at the end."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def submit(self, *lines: str) -> subprocess.CompletedProcess[str]:
        script = "\n".join(["#!/bin/bash", "#PBS -h", "#PBS -l select=1:ncpus=1", *lines])
        done = subprocess.run(
            ["qsub"], input=script + "\ntrue\n", capture_output=True, text=True, timeout=60
        )
        if done.returncode == 0:
            self.ids.append(done.stdout.strip())
        return done

    def attributes(self, job_id: str) -> dict[str, Any]:
        shown = subprocess.run(
            ["qstat", "-f", "-F", "json", job_id], capture_output=True, timeout=60
        )
        assert shown.returncode == 0, shown.stderr
        jobs: dict[str, Any] = json.loads(shown.stdout)["Jobs"]
        assert len(jobs) == 1, jobs
        attributes: dict[str, Any] = next(iter(jobs.values()))
        return attributes


@pytest.fixture
def held(pbs: PbsInfo) -> Iterator[HeldJobs]:
    jobs = HeldJobs()
    yield jobs
    for job_id in jobs.ids:
        subprocess.run(["qdel", job_id], capture_output=True, timeout=60)


@pytest.mark.parametrize("name", ["a,b", "run=1", "a;b", "a:b", "a@b", "r\u00e9sum\u00e9", "a b"])
def test_job_names_qsub_refuses_are_refused(held: HeldJobs, name: str) -> None:
    """qsub answered 'illegal -N value' (or 'directive error' for the blank) to each."""
    done = held.submit(f"#PBS -N {name}")
    assert done.returncode != 0 and "-N" in done.stderr, (done.stdout, done.stderr)
    assert RULES.refusal("name", name) is not None


def test_job_names_the_gateway_writes_arrive_exactly(held: HeldJobs) -> None:
    """Letters, digits, '_+.-', a digit or '-' first, 230 characters: all kept as given."""
    names = ["job_1", "v1.2+fix-3", "9lives", "-leading-dash", "x" * 230]
    for name in names:
        assert RULES.refusal("name", name) is None
        done = held.submit(f"#PBS -N {name}")
        assert done.returncode == 0, (name, done.stderr)
        assert held.attributes(done.stdout.strip())["Job_Name"] == name
    assert held.submit("#PBS -N " + "x" * 231).returncode != 0
    assert RULES.refusal("name", "x" * 231) is not None


def test_a_comma_in_a_custom_attribute_would_ask_for_another_resource(held: HeldJobs) -> None:
    """`-l software=a,walltime=99:00:00` gave the job a walltime of 99 hours."""
    done = held.submit("#PBS -l software=a,walltime=99:00:00")
    assert done.returncode == 0, done.stderr
    resources = held.attributes(done.stdout.strip())["Resource_List"]
    assert (resources["software"], resources["walltime"]) == ("a", "99:00:00")
    assert RULES.refusal("attributes.custom_attributes.software", "a,walltime=99:00:00")


def test_an_ampersand_in_a_custom_attribute_is_refused_by_qsub(held: HeldJobs) -> None:
    """qsub's own words for '&' in a -l value (found by the hostile-string property test)."""
    done = held.submit("#PBS -l software=a&b")
    assert done.returncode != 0
    assert "illegal -l value" in done.stderr and "illegal character" in done.stderr
    assert held.submit("#PBS -l software=a|b>c;d").returncode == 0, "the others pass"
    assert RULES.refusal("attributes.custom_attributes.software", "a&b")
    assert RULES.refusal("attributes.custom_attributes.software", "a|b>c;d") is None


def test_non_ascii_is_refused_or_mangled(held: HeldJobs) -> None:
    """qsub refused it in -o and -l; in -A it was stored as '^\\x03^\\xe9' for 'é', and the
    JSON qstat printed for that job was no longer JSON."""
    assert held.submit("#PBS -o /tmp/\u00e9").returncode != 0
    assert held.submit("#PBS -l software=\u00e9").returncode != 0
    done = held.submit("#PBS -A \u00e9")
    assert done.returncode == 0, done.stderr
    shown = subprocess.run(
        ["qstat", "-f", "-F", "json", done.stdout.strip()], capture_output=True, timeout=60
    )
    with pytest.raises(ValueError):
        json.loads(shown.stdout)
    for path in ("stdout_path", "attributes.custom_attributes.software", "attributes.account"):
        assert RULES.refusal(path, "/tmp/\u00e9") is not None


def test_a_server_in_the_queue_sends_the_job_elsewhere(held: HeldJobs) -> None:
    done = held.submit("#PBS -q workq@nohost.invalid")
    assert done.returncode != 0 and "nohost" in done.stderr, done.stderr
    assert RULES.refusal("attributes.reservation_id", "workq@nohost.invalid") is not None


def test_output_paths_the_gateway_writes_arrive_exactly(held: HeldJobs, pbs_profile: Any) -> None:
    """Rendered by the gateway for the `pbs` resource: ',', '=', '$', '@', ';', '%' and '+'
    reach Output_Path and Error_Path as given (after PBS's 'host:')."""
    registry = ProfileRegistry.from_files([pbs_profile])
    out, err = "/tmp/iri-o,a=b$HOME@x;y%j+z", "/tmp/iri-e!~{a}"
    script = plan_for(
        registry, "pbs", {"executable": "/bin/true", "stdout_path": out, "stderr_path": err}
    ).script
    lines = [line for line in script.split("\n") if line.startswith(("#PBS -o", "#PBS -e"))]
    done = held.submit(*lines)
    assert done.returncode == 0, done.stderr
    attributes = held.attributes(done.stdout.strip())
    assert attributes["Output_Path"].split(":", 1)[1] == out
    assert attributes["Error_Path"].split(":", 1)[1] == err
