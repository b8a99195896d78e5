"""The command line as a user runs it: real processes, exit codes, stdout vs stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LAUNCH_LINE, TEST_PROFILE, site_with_templates

GOOD_JOB: dict[str, Any] = {
    "executable": "/bin/app",
    "arguments": ["--n", "1"],
    "container": {"image": "docker.io/library/ubuntu:22.04"},
    "resources": {"gpu_cores_per_process": 1},
}


def cli(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iri_gateway", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env} if env else None,
    )


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(GOOD_JOB))
    return path


def test_console_script_is_installed() -> None:
    """The install puts the command beside the interpreter that runs the tests.

    Looked up there, not on PATH: CI runs `.venv/bin/pytest` without `.venv/bin` on PATH.
    """
    command = Path(sys.executable).parent / "iri-gateway"
    assert command.is_file(), f"pip install -e . provides {command}"
    result = subprocess.run([str(command), "version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("iri-gateway ")


def test_render_prints_the_script(job_file: Path) -> None:
    result = cli("render", str(job_file), "--resource", "perlmutter-gpu")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("#!/bin/bash\n#SBATCH")
    assert "podman-hpc run --rm --gpu" in result.stdout
    assert result.stderr == ""


def test_render_reads_stdin_and_a_named_profile() -> None:
    result = cli("render", "-", "--profile", str(TEST_PROFILE), stdin=json.dumps(GOOD_JOB))
    assert result.returncode == 0, result.stderr
    assert "--device example.com/gpu=all" in result.stdout


def test_render_refusal_exits_2_with_one_problem_per_line(tmp_path: Path) -> None:
    job = tmp_path / "bad.json"
    job.write_text(
        json.dumps({**GOOD_JOB, "environment": {"1X": "y"}, "container": {"image": "/a.sif"}})
    )
    result = cli("render", str(job), "--resource", "perlmutter-cpu")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert sorted(line.split(":")[0] for line in lines) == [
        "container.image",
        "environment.1X",
        "resources.gpu_cores_per_process",
    ]


def test_invalid_jobspec_exits_2_with_field_paths(tmp_path: Path) -> None:
    job = tmp_path / "bad.json"
    job.write_text(json.dumps({"executable": "x", "resources": {"node_count": 0}, "colour": "red"}))
    result = cli("render", str(job), "-r", "local")
    assert result.returncode == 2
    assert "resources.node_count: Input should be greater than or equal to 1" in result.stderr
    assert "colour: unknown field" in result.stderr


def test_not_json_exits_2_with_line_and_column(tmp_path: Path) -> None:
    job = tmp_path / "bad.json"
    job.write_text('{\n  "executable": \n}')
    result = cli("render", str(job), "-r", "local")
    assert result.returncode == 2
    assert "not JSON" in result.stderr and "line 3" in result.stderr


def test_missing_job_file_exits_1(tmp_path: Path) -> None:
    result = cli("render", str(tmp_path / "absent.json"), "-r", "local")
    assert result.returncode == 1
    assert "cannot read" in result.stderr


def test_unknown_resource_exits_1_and_lists_known(job_file: Path) -> None:
    result = cli("render", str(job_file), "-r", "summit")
    assert result.returncode == 1
    assert "unknown resource 'summit'" in result.stderr and "perlmutter-gpu" in result.stderr


def test_resource_required_when_several_are_loaded(job_file: Path) -> None:
    result = cli("render", str(job_file))
    assert result.returncode == 1 and "--resource" in result.stderr


def test_broken_profile_exits_1_with_file_and_line(job_file: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(TEST_PROFILE.read_text().replace("kind: slurm", "kind: lsf"))
    result = cli("render", str(job_file), "--profile", str(broken))
    assert result.returncode == 1
    line = TEST_PROFILE.read_text().splitlines().index("      kind: slurm") + 1
    assert f"{broken}:{line}: resources[0].scheduler.kind:" in result.stderr


def test_plan_prints_json(job_file: Path) -> None:
    result = cli("plan", str(job_file), "-r", "perlmutter-gpu")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["runtime"] == "podman-hpc"
    assert plan["gpu"] == {
        "flags": ["--gpu"],
        "devices": [],
        "gpus_per_node": 1,
        "request": "per-process",
    }
    assert plan["pre_submit"] == [["podman-hpc", "pull", "docker.io/library/ubuntu:22.04"]]
    render = cli("render", str(job_file), "-r", "perlmutter-gpu")
    assert plan["script"] == render.stdout, "the preview is the script, byte for byte"


def test_plan_refusal_is_json_with_exit_2(job_file: Path) -> None:
    result = cli("plan", str(job_file), "-r", "perlmutter-cpu")
    assert result.returncode == 2
    document = json.loads(result.stdout)
    assert document["problems"][0]["name"] == "resources.gpu_cores_per_process"


def test_capabilities_table_and_json() -> None:
    table = cli("capabilities")
    assert table.returncode == 0, table.stderr
    for resource in ("perlmutter-gpu", "frontier", "polaris", "aurora", "local"):
        assert resource in table.stdout
    as_json = cli("capabilities", "--json", "-r", "frontier")
    document = json.loads(as_json.stdout)
    assert document[0]["hardware"]["gpu_vendor"] == "amd"
    assert document[0]["hardware"]["rocm"] == "6.2.4"
    assert document[0]["runtimes"][0]["gpu"] == "flags --rocm"


def test_capabilities_show_the_file_roots_a_user_may_use() -> None:
    """The roots a job's directory must lie in are stated, so a refusal is no surprise."""
    as_json = cli("capabilities", "--json", "-r", "perlmutter-gpu")
    roots = json.loads(as_json.stdout)[0]["file_roots"]
    assert roots == [
        "/global/homes/{account_initial}/{account}",
        "/pscratch/sd/{account_initial}/{account}",
    ]
    table = cli("capabilities", "-r", "perlmutter-gpu", env={"COLUMNS": "200"})
    assert "/pscratch/sd/{account_initial}/{account}" in table.stdout


def test_capabilities_table_shows_what_a_job_may_ask_of_each_runtime() -> None:
    """Mount sources, networks, CDI devices and the extra-option allow-list, as in the JSON;
    patterns are shown as written (`[kmg]` is not taken for markup)."""
    table = cli("capabilities", "-r", "cdi-gpu", env={"COLUMNS": "250"})
    assert table.returncode == 0, table.stderr
    text = table.stdout
    assert "Container runtimes: what a job may ask of each" in text
    rows = {
        line.split("│")[2].strip(): line
        for line in text.splitlines()
        if line.startswith("│ cdi-gpu") and "│ host" in line
    }
    assert set(rows) == {"apptainer", "podman *"}
    podman = [cell.strip() for cell in rows["podman *"].split("│")]
    assert podman[3:7] == ["/home", "host, none", "nvidia.com/gpu=*", "--read-only"]
    assert "--shm-size=[0-9]+[kmg]?" in text
    assert "/scratch" in text and "read-write" in text
    assert "(OCI mode: --oci)" in text and "--writable-tmpfs" in text
    assert "without a count: refused" in text
    document = json.loads(cli("capabilities", "--json", "-r", "cdi-gpu").stdout)[0]
    assert document["gpu_default_request"] == "refuse"
    assert [r["oci_mode"] for r in document["runtimes"]] == [True, False]
    frontier = cli("capabilities", "-r", "frontier", env={"COLUMNS": "250"}).stdout
    for shown in (
        "/lustre/orion",
        "/ccs/proj",
        "host, none",
        "--writable-tmpfs",
        "--contain",
        "--no-home",
        "without a count: whole node",
    ):
        assert shown in frontier, shown


def test_profile_check_passes_on_the_shipped_profiles() -> None:
    result = cli("profile", "check", "--json", "facility_profiles")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads(result.stdout)
    assert {row["outcome"] for row in rows} <= {"ok", "unsupported"}
    assert {
        (r["resource"], r["runtime"])
        for r in rows
        if r["sample"] == "gpu+mpi" and r["outcome"] == "ok"
    } >= {
        ("perlmutter-gpu", "podman-hpc"),
        ("perlmutter-gpu", "shifter"),
        ("frontier", "apptainer"),
        ("polaris", "apptainer"),
        ("aurora", "apptainer"),
    }


def test_profile_check_fails_on_a_template_shellcheck_rejects(tmp_path: Path) -> None:
    profile = site_with_templates(tmp_path, {"runtimes/podman.sh.j2": "cd $HOME/x\n" + LAUNCH_LINE})
    result = cli("profile", "check", "--json", str(profile))
    assert result.returncode == 1
    failed = [row for row in json.loads(result.stdout) if row["outcome"] == "FAIL"]
    assert failed and all(row["runtime"] == "podman" for row in failed)
    assert "SC2164" in failed[0]["detail"] or "SC2086" in failed[0]["detail"]


def test_profile_schema_matches_the_shipped_file() -> None:
    result = cli("profile", "schema")
    shipped = Path("facility_profiles/schema.json").read_text()
    assert result.stdout == shipped


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(3600, "1h"), (1800, "30m"), (5400, "1h30m"), (90, "1m30s"), (172800, "48h")],
)
def test_human_duration(seconds: int, text: str) -> None:
    from iri_gateway.cli.views import human_duration

    assert human_duration(seconds) == text
