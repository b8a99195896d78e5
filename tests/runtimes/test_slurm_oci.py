"""The slurm-oci runtime without a cluster: what profiles and jobs it refuses, and the bundle
config its script writes (the runs themselves: tests/integration/test_slurm_oci_cluster.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from iri_gateway.errors import JobRejectedError
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.capabilities import capabilities
from iri_gateway.profiles.loading import ProfileRegistry, validate_profile
from tests.support.paths import ROOT, STANDINS

REGISTRY = ProfileRegistry.builtin()
EXAMPLE = ROOT / "facility_profiles/example-slurm-oci.yaml"


def example_with(change: dict[str, Any], scheduler: str = "slurm") -> dict[str, Any]:
    document = yaml.safe_load(EXAMPLE.read_text())
    resource = document["resources"][0]
    resource["runtimes"]["slurm-oci"].update(change)
    resource["scheduler"]["kind"] = scheduler
    return document


def refusal(document: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        validate_profile(document)
    return str(caught.value)


def test_the_example_profile_offers_slurm_oci() -> None:
    runtimes = REGISTRY.get("oci-cpu").resource.runtimes
    assert runtimes.default == "slurm-oci" and runtimes.available() == ["slurm-oci"]


def test_ch_run_oci_is_refused_with_the_reason() -> None:
    text = refusal(example_with({"oci_conf": "ch-run-oci"}))
    assert "runtimes.slurm-oci.oci_conf: ch-run-oci cannot run Slurm's bundles" in text
    assert "0.31" in text and "runc" in text


def test_the_oci_conf_flavour_is_required() -> None:
    document = example_with({})
    del document["resources"][0]["runtimes"]["slurm-oci"]["oci_conf"]
    assert "runtimes.slurm-oci.oci_conf: required" in refusal(document)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"gpu": {"flags": ["--nv"]}}, "runtimes.slurm-oci.gpu: this gateway writes no GPU"),
        ({"mpi": {"binds": ["/opt/mpi"]}}, "runtimes.slurm-oci.mpi: Slurm 22.05 gives"),
        ({"networks": ["host", "none"]}, "runtimes.slurm-oci.networks: "),
        ({"rootfs_cache": None}, "runtimes.slurm-oci.staging: docker-uri, oci images are staged"),
        ({"staging": {"when": "submit", "command": ["x"]}}, "runtimes.slurm-oci.staging.when"),
    ],
)
def test_what_the_bundle_cannot_do_is_refused_at_load(change: dict[str, Any], words: str) -> None:
    assert words in refusal(example_with(change))


def test_slurm_oci_needs_slurm() -> None:
    assert "a pbs resource cannot offer it" in refusal(example_with({}, scheduler="pbs"))


def test_other_runtimes_refuse_the_slurm_oci_settings() -> None:
    document = example_with({})
    runtimes = document["resources"][0]["runtimes"]
    runtimes["podman"] = {"image_forms": ["oci"], "oci_conf": "runc", "rootfs_cache": "$HOME/x"}
    text = refusal(document)
    assert "runtimes.podman.oci_conf: podman is not run through Slurm's oci.conf" in text
    assert "runtimes.podman.rootfs_cache: podman stages no root filesystems" in text


def reasons(document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(JobRejectedError) as caught:
        make_plan(parse_jobspec(document), REGISTRY.get("oci-cpu"))
    return {problem.field: problem.reason for problem in caught.value.problems}


def test_two_tasks_on_a_node_are_refused_naming_the_field() -> None:
    job = {"executable": "/bin/true", "container": {"image": "ubuntu:22.04"}}
    found = reasons({**job, "resources": {"node_count": 1, "process_count": 2}})
    assert "one container task per node" in found["resources.process_count"]
    found = reasons(
        {**job, "resources": {"node_count": 2, "process_count": 4, "processes_per_node": 2}}
    )
    assert "one container task per node" in found["resources.processes_per_node"]


def test_mpi_and_mpi_launchers_are_refused_with_the_reason() -> None:
    job = {
        "executable": "/bin/true",
        "container": {"image": "ubuntu:22.04"},
        "resources": {"node_count": 2, "process_count": 2},
    }
    assert "no per-task variables" in reasons({**job, "launcher": "srun"})["container.mpi"]
    found = reasons(
        {**job, "launcher": "srun", "container": {"image": "ubuntu:22.04", "mpi": False}}
    )
    assert "no per-task variables" in found["launcher"]


def test_the_image_entrypoint_cannot_be_used() -> None:
    assert (
        "replaces the bundle's process.args"
        in reasons({"container": {"image": "ubuntu:22.04"}})["executable"]
    )


def test_one_task_per_node_on_several_nodes_is_planned() -> None:
    plan = make_plan(
        parse_jobspec(
            {
                "executable": "/bin/true",
                "resources": {"node_count": 2, "process_count": 2},
                "container": {"image": "ubuntu:22.04"},
            }
        ),
        REGISTRY.get("oci-cpu"),
    )
    assert '--ntasks-per-node=1 "--container=$iri_oci_bundle"' in plan.script


STAND_IN_SRUN = (STANDINS / "slurm_oci" / "srun").read_text()
"""The stand-in `srun` that only copies the bundle's config.json (tests/standins/)."""


def test_the_script_writes_the_config_with_every_value_intact(tmp_path: Path) -> None:
    """User values travel in JSON made by the gateway; the job directory (known only on the
    node) is JSON-escaped by the script: quotes, backslashes and `$` in either arrive as
    written, and nothing in them runs."""
    hostile = 'it\'s "$(touch CANARY)" `touch CANARY` \\ \\u0000 ${HOME}'
    directory = tmp_path / 'job "dir" \\ $HOME'
    directory.mkdir()
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    plan = make_plan(
        parse_jobspec(
            {
                "executable": "/bin/echo",
                "arguments": [hostile, ""],
                "environment": {"V": hostile},
                "directory": str(directory),
                "container": {
                    "image": f"{rootfs}/",
                    "volume_mounts": [
                        {"source": "/home/x y", "target": "/data 'in'", "read_only": True}
                    ],
                },
            }
        ),
        REGISTRY.get("oci-cpu"),
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(STAND_IN_SRUN)
    (bin_dir / "srun").chmod(0o755)
    script = tmp_path / "job.sh"
    script.write_text(plan.script)
    copy = tmp_path / "config.json"
    ran = subprocess.run(
        ["bash", str(script)],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=30,
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "SLURM_JOB_ID": "7",
            "HOME": str(tmp_path),
            "IRI_CONFIG_COPY": str(copy),
        },
    )
    assert ran.returncode == 0, ran.stderr
    config = json.loads(copy.read_text())
    process = config["process"]
    assert process["args"] == ["/bin/echo", hostile, ""]
    assert f"V={hostile}" in process["env"]
    assert process["cwd"] == str(directory)
    mounts = {m["destination"]: m for m in config["mounts"]}
    assert mounts["/"]["source"] == str(rootfs)
    assert mounts[str(directory)] == {
        "destination": str(directory),
        "type": "none",
        "source": str(directory),
        "options": ["rbind", "rw"],
    }
    assert mounts["/data 'in'"] == {
        "destination": "/data 'in'",
        "type": "none",
        "source": "/home/x y",
        "options": ["rbind", "ro"],
    }
    assert mounts["/tmp"]["type"] == "tmpfs"
    uid = int(subprocess.run(["id", "-u"], capture_output=True, text=True).stdout)
    assert config["linux"]["uidMappings"] == [{"containerID": 0, "hostID": uid, "size": 1}]
    assert not list(tmp_path.rglob("CANARY"))
    assert not list(directory.glob(".iri-oci-*")), "the bundle is removed after the step"


def test_capabilities_say_what_slurm_oci_is_here() -> None:
    (runtime,) = capabilities(REGISTRY.get("oci-cpu")).runtimes
    assert (runtime.name, runtime.oci_conf, runtime.max_processes_per_node) == (
        "slurm-oci",
        "runc",
        1,
    )
    assert runtime.rootfs_cache == "$HOME/.cache/iri-gateway/oci"
    assert runtime.image_staging == "job: /opt/site/bin/stage-rootfs IMAGE FOLDER"
    assert runtime.mpi is None and runtime.gpu is None
