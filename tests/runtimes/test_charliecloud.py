"""The `charliecloud` runtime without a cluster: what planning refuses (over the API, as the
user meets it), how registry images are staged and run by name, and that the staged image's
folder is where the real `ch-image` puts it. Real jobs: tests/integration/
test_charliecloud_cluster.py; hostile strings under the real ch-run: tests/shell_safety/.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.errors import JobRejectedError
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.capabilities import capabilities
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.runtimes.charliecloud import storage_path
from iri_gateway.service.operations.settings import Settings
from tests.support.paths import ROOT

LANL = ROOT / "facility_profiles" / "lanl-example.yaml"
REGISTRY = ProfileRegistry.from_files([LANL])
PROJECT = {"X-IRI-Facility-Project": "proj1"}


def job(image: str, **container: Any) -> dict[str, Any]:
    return {
        "executable": "/opt/app/bin/app",
        "arguments": ["--in", "/mnt/0/x"],
        "directory": "/users/alice/run",
        "container": {"runtime": "charliecloud", "image": image, **container},
    }


def script(doc: dict[str, Any], resource: str = "lanl-gpu") -> str:
    return make_plan(parse_jobspec(doc), REGISTRY.get(resource)).script


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def app(tmp_path: Path) -> FastAPI:
    return create_app(Settings(data_dir=tmp_path, profiles=[LANL]), run_poller=False)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        yield client


def alice(app: FastAPI) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.state.tokens.issue('alice', ['proj1'])}", **PROJECT}


@pytest.mark.anyio
async def test_read_only_mount_is_a_422_naming_the_field_and_the_reason(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    mount = {"source": "/users/alice/data", "target": "/mnt/0"}
    refused = await client.post(
        "/api/v2/compute/plan/lanl-gpu",
        headers=alice(app),
        json=job("/users/alice/app.sqfs", volume_mounts=[mount]),
    )  # read_only defaults to true
    assert refused.status_code == 422, refused.text
    [problem] = refused.json()["invalid_params"]
    assert problem["name"] == "container.volume_mounts[0].read_only"
    assert "charliecloud cannot mount read-only" in problem["reason"]
    assert "(-b SRC:DST) has no read-only form" in problem["reason"]
    assert "read_only: false" in problem["reason"]  # what is offered instead

    planned = await client.post(
        "/api/v2/compute/plan/lanl-gpu",
        headers=alice(app),
        json=job("/users/alice/app.sqfs", volume_mounts=[{**mount, "read_only": False}]),
    )
    assert planned.status_code == 200, planned.text
    assert "-b /users/alice/data:/mnt/0 " in planned.json()["script"]


@pytest.mark.anyio
async def test_a_job_without_a_command_is_a_422(app: FastAPI, client: httpx.AsyncClient) -> None:
    body = {"container": {"runtime": "charliecloud", "image": "/users/alice/app.sqfs"}}
    refused = await client.post("/api/v2/compute/plan/lanl-gpu", headers=alice(app), json=body)
    assert refused.status_code == 422, refused.text
    names = {p["name"]: p["reason"] for p in refused.json()["invalid_params"]}
    assert "never an image's entrypoint" in names["executable"]


def test_path_images_run_as_they_are_and_are_never_staged() -> None:
    for image in ("/users/alice/app.sqfs", "/users/alice/app/"):
        text = script({**job(image), "resources": {"gpu_cores_per_process": 1}})
        assert "ch-image pull" not in text and "ch-fromhost" not in text, text
        assert f"    {image} -- /opt/app/bin/app --in /mnt/0/x\n" in text, text


def test_registry_image_is_pulled_then_given_the_gpu_and_mpi_libraries_once() -> None:
    text = script(
        {
            **job("ubuntu:22.04"),
            "launcher": "srun",
            "resources": {"node_count": 2, "processes_per_node": 4, "gpu_cores_per_process": 1},
        }
    )
    lines = text.split("\n")
    pull = lines.index("ch-image pull docker.io/library/ubuntu:22.04 || exit 1")
    assert lines[pull - 1] == 'export "USER=${USER:-$(id -un)}" || exit 1', "ch-image needs it"
    assert lines[pull + 1] == (
        "env CH_IMAGE_STORAGE=/nonexistent/iri-gateway ch-fromhost --nvidia --cray-mpi "
        '"${CH_IMAGE_STORAGE:-/var/tmp/$USER.ch}/img/docker.io%library%ubuntu+22.04" || exit 1'
    )
    launch = text.index("srun")
    assert pull < text[:launch].count("\n"), "staged before the launch, not per rank"
    assert "    docker.io/library/ubuntu:22.04 -- /opt/app/bin/app" in text, "run by name"
    cpu = script(job("ubuntu:22.04"), resource="lanl-cpu")
    assert "ch-image pull docker.io/library/ubuntu:22.04 || exit 1" in cpu
    assert "ch-fromhost" not in cpu, "no GPUs, no MPI: nothing to inject"


def test_command_line_order_environment_and_workdir() -> None:
    text = script(
        {
            **job("/users/alice/app.sqfs", workdir="/mnt/1"),
            "environment": {"A": "$HOME x", "B": ""},
            "inherit_environment": False,
        }
    )
    launch = text[text.index("ch-run") :].replace(" \\\n    ", " ")
    assert launch.startswith(
        "ch-run --home '--unset-env=*' --env-no-expand '--set-env=A=$HOME x' --set-env=B= "
        "-c /mnt/1 /users/alice/app.sqfs -- /opt/app/bin/app --in /mnt/0/x\n"
    ), launch
    # `-c` always: without a workdir, the job's directory (ch-run would start in /).
    assert '-c "$PWD" /users/alice/app.sqfs --' in script(job("/users/alice/app.sqfs")).replace(
        " \\\n    ", " "
    )


def test_extra_options_only_from_the_allow_list() -> None:
    assert "--private-tmp" in script(
        job("/users/alice/app.sqfs", extra_options={"charliecloud": ["--private-tmp"]})
    )
    with pytest.raises(JobRejectedError) as refused:
        script(job("/users/alice/app.sqfs", extra_options={"charliecloud": ["-w"]}))
    [problem] = refused.value.problems
    assert problem.field == "container.extra_options.charliecloud[0]"


def test_the_staged_image_folder_is_where_the_real_ch_image_puts_it(tmp_path: Path) -> None:
    """`ch-image import` (no registry needed) stores an image under the name a pull would;
    the folder the gateway hands ch-fromhost, expanded by bash, is that folder."""
    (tmp_path / "rootfs" / "etc").mkdir(parents=True)
    name = "registry.example.org:5000/team/app:v1.2"
    env = {
        "PATH": "/usr/bin:/bin",
        "USER": "nobody-here",
        "HOME": str(tmp_path),
        "CH_IMAGE_STORAGE": str(tmp_path / "storage"),
    }
    imported = subprocess.run(
        ["ch-image", "--no-cache", "import", str(tmp_path / "rootfs"), name],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert imported.returncode == 0, imported.stderr
    expanded = subprocess.run(
        ["bash", "-c", f'printf %s "{storage_path(name)}"'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert os.path.isdir(os.path.join(expanded, "etc")), (
        expanded,
        os.listdir(tmp_path / "storage" / "img"),
    )
    default = subprocess.run(
        ["bash", "-c", f'printf %s "{storage_path(name)}"'],
        env={**env, "CH_IMAGE_STORAGE": ""},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert default == "/var/tmp/nobody-here.ch/img/registry.example.org+5000%team%app+v1.2"


def test_capabilities_say_mounts_are_read_write_only() -> None:
    [runtime] = capabilities(REGISTRY.get("lanl-gpu")).runtimes
    assert (runtime.name, runtime.read_only_mounts, runtime.read_write_mounts) == (
        "charliecloud",
        False,
        True,
    )
    assert runtime.image_staging == "job: ch-image pull IMAGE"
    others = capabilities(ProfileRegistry.builtin().get("perlmutter-gpu")).runtimes
    assert all(r.read_only_mounts for r in others)
