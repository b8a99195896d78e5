"""CDI where sites offer it: the shipped `example-cdi.yaml` gives GPUs to Podman and to
Apptainer in OCI mode by CDI names; Apptainer takes `--device` only where the profile says
its Apptainer runs in OCI mode (`oci_mode: true`, rendered as `--oci`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.errors import ProfileError
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile, load_profile
from tests.conftest import plan_for, problems_for

IMAGE = "docker.io/library/ubuntu:22.04"
CDI_PROFILE = builtin_profile("example-cdi")


def job(runtime: str, devices: list[str], **overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "executable": "/bin/app",
        "container": {"image": IMAGE, "runtime": runtime, "devices": devices},
        "resources": {"gpu_cores_per_process": 1},
    }
    document.update(overrides)
    return document


@pytest.mark.parametrize("runtime", ["podman", "apptainer"])
def test_a_named_cdi_device_reaches_the_runtime(registry: ProfileRegistry, runtime: str) -> None:
    plan = plan_for(registry, "cdi-gpu", job(runtime, ["nvidia.com/gpu=0"]))
    assert "--device nvidia.com/gpu=0" in plan.script
    assert "#SBATCH --gres=gpu:1" in plan.script.splitlines()
    assert plan.gpu is not None and plan.gpu.devices == ["nvidia.com/gpu=0"]
    launch = next(line for line in plan.script.splitlines() if f"{runtime} " in line)
    if runtime == "apptainer":
        assert launch.lstrip().startswith("apptainer exec --oci "), launch
    else:
        assert "--oci" not in launch


def test_the_default_device_is_given_when_none_is_named(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry,
        "cdi-gpu",
        {
            "executable": "/bin/app",
            "container": {"image": IMAGE, "runtime": "apptainer"},
            "resources": {"gpu_cores_per_process": 2},
        },
    )
    assert "--device nvidia.com/gpu=all" in plan.script
    assert "#SBATCH --gres=gpu:2" in plan.script.splitlines()


def test_gpus_without_a_count_are_refused_on_the_cdi_site(registry: ProfileRegistry) -> None:
    (problem,) = problems_for(
        registry, "cdi-gpu", job("podman", ["nvidia.com/gpu=0"], resources={})
    )
    assert problem.field == "container.devices"
    assert (problem.offered or "").startswith("resources.gpu_cores_per_process")


def test_apptainer_without_oci_mode_refuses_cdi_naming_the_setting(
    registry: ProfileRegistry,
) -> None:
    (problem,) = problems_for(registry, "frontier", job("apptainer", ["amd.com/gpu=0"]))
    assert problem.field == "container.devices"
    assert "only in OCI mode (--oci)" in problem.reason
    assert "runtimes.apptainer.oci_mode" in problem.reason
    assert problem.offered == "vendor GPU flags via container.gpu"
    frontier = plan_for(
        registry, "frontier", {"executable": "/bin/app", "container": {"image": IMAGE}}
    )
    assert "--oci" not in frontier.script


def profile_error(tmp_path: Path, old: str, new: str) -> str:
    text = CDI_PROFILE.read_text()
    assert old in text
    path = tmp_path / "site.yaml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    return str(caught.value)


def test_a_profile_giving_apptainer_cdi_without_oci_mode_is_refused(tmp_path: Path) -> None:
    message = profile_error(tmp_path, "        oci_mode: true\n", "")
    assert (
        "apptainer.gpu.cdi_devices: apptainer injects CDI devices only in OCI mode "
        "(--oci); set oci_mode: true"
    ) in message


def test_oci_mode_is_only_an_apptainer_setting(tmp_path: Path) -> None:
    message = profile_error(tmp_path, "      podman:\n", "      podman:\n        oci_mode: true\n")
    assert "podman.oci_mode: podman has no OCI mode" in message


def test_profile_check_passes_with_shellcheck() -> None:
    assert shutil.which("shellcheck"), "shellcheck is required"
    checked = subprocess.run(
        [sys.executable, "-m", "iri_gateway", "profile", "check", str(CDI_PROFILE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "12 of 12 samples passed (bash -n and shellcheck -S warning)" in checked.stdout
