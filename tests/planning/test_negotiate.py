"""Negotiation: one test per kind of problem, all problems at once, and the defaults."""

from __future__ import annotations

from typing import Any

import pytest

from iri_gateway.profiles.loading import ProfileRegistry
from tests.conftest import fields, plan_for, problems_for

IMAGE = "docker.io/library/ubuntu:22.04"


def job(**overrides: Any) -> dict[str, Any]:
    """A small valid container job, with fields replaced or added."""
    document: dict[str, Any] = {
        "executable": "/bin/app",
        "arguments": ["x"],
        "container": {"image": IMAGE},
    }
    document.update(overrides)
    return document


def only(problems: list[Any], field: str) -> Any:
    matching = [p for p in problems if p.field == field]
    assert len(matching) == 1, f"expected one problem on {field}, got {problems}"
    return matching[0]


def test_unsupported_runtime_names_the_runtimes_offered(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry, "perlmutter-gpu", job(container={"image": IMAGE, "runtime": "apptainer"})
    )
    problem = only(problems, "container.runtime")
    assert "does not offer runtime 'apptainer'" in problem.reason
    assert problem.offered == "podman-hpc, shifter, none"


def test_unknown_runtime_name_is_a_schema_error() -> None:
    from iri_gateway.errors import InvalidJobSpecError
    from iri_gateway.planning.jobspec_io import parse_jobspec

    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec(job(container={"image": IMAGE, "runtime": "docker"}))
    assert [p.field for p in caught.value.problems] == ["container.runtime"]


def test_gpus_asked_where_there_are_none(registry: ProfileRegistry) -> None:
    problems = problems_for(registry, "perlmutter-cpu", job(resources={"gpu_cores_per_process": 1}))
    problem = only(problems, "resources.gpu_cores_per_process")
    assert "have none" in problem.reason
    assert len(problems) == 1, "no second, redundant GPU-binding problem"


def test_more_gpus_per_node_than_exist(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "perlmutter-gpu",
        job(
            launcher="srun",
            resources={"node_count": 1, "processes_per_node": 4, "gpu_cores_per_process": 2},
        ),
    )
    problem = only(problems, "resources.gpu_cores_per_process")
    assert "8 GPUs per node; the nodes have 4" in problem.reason
    assert problem.offered == "at most 4 nvidia a100 per node"


def test_cdi_device_not_offered(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "testsite-gpu",
        job(
            container={"image": IMAGE, "devices": ["example.com/gpu=0", "nvidia.com/gpu=all"]},
        ),
    )
    problem = only(problems, "container.devices[1]")
    assert "'nvidia.com/gpu=all' is not offered" in problem.reason
    assert "example.com/gpu=all" in (problem.offered or "")


def test_cdi_devices_where_the_runtime_has_no_cdi(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "perlmutter-gpu",
        job(
            container={"image": IMAGE, "devices": ["nvidia.com/gpu=all"]},
        ),
    )
    problem = only(problems, "container.devices")
    assert "cannot inject CDI devices" in problem.reason


def test_mpi_with_a_runtime_that_cannot_bind_it(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "testsite-gpu",
        job(
            launcher="srun",
            resources={"node_count": 2, "processes_per_node": 2},
        ),
    )
    problem = only(problems, "container.mpi")
    assert "podman cannot bind mpich" in problem.reason
    assert problem.offered == "apptainer"


def test_mpi_on_a_resource_without_mpi(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "local",
        job(
            launcher="mpirun",
            resources={"process_count": 2},
        ),
    )
    assert "launcher" in fields(problems)
    assert "resources.process_count" in fields(problems)


def test_network_none_unsupported(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "perlmutter-gpu",
        job(
            container={"image": IMAGE, "runtime": "shifter", "network": "none"},
        ),
    )
    problem = only(problems, "container.network")
    assert problem.offered == "host"


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("/etc/shadow", "outside the paths"),
        ("/global/cfsx/data", "outside the paths"),
        ("data/in", "relative"),
        ("/global/cfs/../../etc", "contains '..'"),
        ("/global/cfs/a:b", "cannot express"),
        ("/global/cfs/a,b", "cannot express"),
        ("/global/cfs/a\nb", "cannot express"),
    ],
)
def test_mount_sources_refused(registry: ProfileRegistry, source: str, reason: str) -> None:
    problems = problems_for(
        registry,
        "perlmutter-gpu",
        job(
            container={"image": IMAGE, "volume_mounts": [{"source": source, "target": "/data"}]},
        ),
    )
    problem = only(problems, "container.volume_mounts[0].source")
    assert reason in problem.reason


def test_mount_target_must_be_absolute(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "perlmutter-gpu",
        job(
            container={
                "image": IMAGE,
                "volume_mounts": [{"source": "/global/cfs/d", "target": "data"}],
            },
        ),
    )
    assert "relative" in only(problems, "container.volume_mounts[0].target").reason


def test_read_write_mount_where_only_read_only_is_allowed(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "testsite-gpu",
        job(
            container={
                "image": IMAGE,
                "volume_mounts": [{"source": "/srv/data/x", "target": "/x", "read_only": False}],
            }
        ),
    )
    problem = only(problems, "container.volume_mounts[0].read_only")
    assert problem.offered == "read_only: true"


def test_walltime_over_the_queue_limit(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "perlmutter-gpu",
        job(
            attributes={"queue_name": "debug", "duration": 3600},
        ),
    )
    problem = only(problems, "attributes.duration")
    assert "3600 s exceeds the 'debug' limit of 1800 s" in problem.reason


def test_node_count_over_the_queue_limit(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "perlmutter-gpu",
        job(
            attributes={"queue_name": "debug"},
            resources={"node_count": 9},
        ),
    )
    assert only(problems, "resources.node_count").offered == "at most 8"


def test_node_count_over_the_machine(registry: ProfileRegistry) -> None:
    problems = problems_for(registry, "testsite-gpu", job(resources={"node_count": 5}))
    assert any("testsite-gpu has 4" in p.reason for p in problems)


def test_queue_minimum_nodes(registry: ProfileRegistry) -> None:
    problems = problems_for(registry, "testsite-gpu", job(attributes={"queue_name": "big"}))
    assert "at least 2 nodes" in only(problems, "resources.node_count").reason


def test_unknown_queue_lists_the_queues(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "frontier",
        job(
            container={"image": "/images/a.sif"},
            attributes={"queue_name": "regular"},
        ),
    )
    assert only(problems, "attributes.queue_name").offered == "batch, extended, debug"


def test_extra_option_not_on_the_allow_list(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "perlmutter-gpu",
        job(
            container={
                "image": IMAGE,
                "extra_options": {
                    "podman-hpc": ["--nccl", "--privileged"],
                    "apptainer": ["--anything"],
                },
            }
        ),
    )
    problem = only(problems, "container.extra_options.podman-hpc[1]")
    assert "'--privileged' is not on the site's allow-list" in problem.reason
    assert "--nccl" in (problem.offered or "")
    assert len(problems) == 1, "options for other runtimes are not applied, so not judged"


def test_extra_options_key_must_be_a_runtime(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "perlmutter-gpu",
        job(
            container={
                "image": IMAGE,
                "extra_options": {"dockerd": ["--x"]},
            }
        ),
    )
    assert "not a runtime name" in only(problems, "container.extra_options.dockerd").reason


def test_image_form_the_runtime_does_not_accept(registry: ProfileRegistry) -> None:
    problems = problems_for(registry, "perlmutter-gpu", job(container={"image": "/images/a.sif"}))
    problem = only(problems, "container.image")
    assert "does not accept sif images" in problem.reason
    assert problem.offered == "oci, docker-uri"


def test_image_that_is_no_reference_at_all(registry: ProfileRegistry) -> None:
    problems = problems_for(registry, "perlmutter-gpu", job(container={"image": "Ubuntu Latest"}))
    assert "not an OCI reference" in only(problems, "container.image").reason


@pytest.mark.parametrize("name", ["1ABC", "A-B", "A B", "", "X=Y"])
def test_invalid_environment_variable_name(registry: ProfileRegistry, name: str) -> None:
    problems = problems_for(registry, "perlmutter-gpu", job(environment={name: "v"}))
    assert "not a valid variable name" in only(problems, f"environment.{name}").reason


def test_control_characters_refused_in_directive_fields(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "perlmutter-gpu",
        job(
            name="a\nb",
            stdout_path="/o\n#SBATCH --x",
            directory="/d\r",
        ),
    )
    assert set(fields(problems)) == {"name", "stdout_path", "directory"}


def test_pbs_directive_values_cannot_hold_blanks(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "polaris",
        job(
            container={"image": "/eagle/a.sif"},
            name="my job",
            stdout_path="host:/x",
        ),
    )
    assert set(fields(problems)) == {"name", "stdout_path"}


def test_custom_attribute_must_be_allowed(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "testsite-gpu",
        job(
            attributes={"custom_attributes": {"comment": "ok", "partition": "secret"}},
        ),
    )
    problem = only(problems, "attributes.custom_attributes.partition")
    assert problem.offered == "mail-type, comment"


def test_contradictory_counts(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "testsite-gpu",
        job(
            resources={"node_count": 3, "process_count": 2},
        ),
    )
    assert "cannot occupy 3 nodes" in only(problems, "resources.process_count").reason


def test_cpu_and_memory_per_node(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "testsite-gpu",
        job(
            resources={"cpu_cores_per_process": 4, "memory": 3 * 1024**3},
        ),
    )
    assert set(fields(problems)) == {"resources.cpu_cores_per_process", "resources.memory"}


def test_no_executable_and_no_container(registry: ProfileRegistry) -> None:
    problems = problems_for(registry, "local", {"arguments": ["x"]})
    assert "required when no container" in only(problems, "executable").reason


def test_unknown_launcher(registry: ProfileRegistry) -> None:
    problems = problems_for(registry, "perlmutter-gpu", job(launcher="aprun"))
    assert only(problems, "launcher").offered == "single, multiple, srun, mpirun, mpiexec"


def test_every_problem_is_reported_at_once(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "perlmutter-gpu",
        {
            "executable": "/bin/app",
            "environment": {"9X": "1"},
            "launcher": "aprun",
            "attributes": {"queue_name": "debug", "duration": 99999},
            "resources": {"node_count": 20, "gpu_cores_per_process": 5},
            "container": {
                "image": "/x.sif",
                "network": "none",
                "volume_mounts": [{"source": "/etc", "target": "/etc"}],
                "extra_options": {"podman-hpc": ["--privileged"]},
            },
        },
    )
    assert set(fields(problems)) >= {
        "environment.9X",
        "launcher",
        "attributes.duration",
        "resources.node_count",
        "resources.gpu_cores_per_process",
        "container.image",
        "container.network",
        "container.volume_mounts[0].source",
        "container.extra_options.podman-hpc[0]",
    }


# ---- defaults and decisions -------------------------------------------------------------


def test_gpu_defaults_on_when_gpus_are_asked(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "perlmutter-gpu", job(resources={"gpu_cores_per_process": 1}))
    assert plan.gpu is not None and plan.gpu.flags == ["--gpu"]
    assert "--gpu" in plan.script.split()


def test_gpu_can_be_turned_off(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry,
        "perlmutter-gpu",
        job(
            resources={"gpu_cores_per_process": 1},
            container={"image": IMAGE, "gpu": False},
        ),
    )
    assert plan.gpu is None
    assert "--gpu" not in plan.script.split()
    assert "#SBATCH --gpus-per-task=1" in plan.script, "the allocation still has the GPUs"


def test_cdi_default_devices_for_gpu_jobs(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "testsite-gpu", job(resources={"gpu_cores_per_process": 2}))
    assert plan.gpu is not None and plan.gpu.devices == ["example.com/gpu=all"]
    assert "--device example.com/gpu=all" in plan.script
    assert "#SBATCH --gres=gpu:2" in plan.script


def test_mpi_defaults_on_for_mpi_launchers(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry,
        "perlmutter-gpu",
        job(
            launcher="mpirun",
            resources={"node_count": 2, "processes_per_node": 4},
        ),
    )
    assert plan.launcher == "mpi" and plan.mpi is not None
    assert plan.mpi.container_flags == ["--mpi"]
    assert any("runs as the site's 'srun'" in w for w in plan.warnings)


def test_gpu_and_mpi_use_the_gpu_aware_mpi_flags(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry,
        "perlmutter-gpu",
        job(
            launcher="srun",
            resources={"node_count": 2, "processes_per_node": 4, "gpu_cores_per_process": 1},
        ),
    )
    assert plan.mpi is not None and plan.mpi.container_flags == ["--cuda-mpi"]
    words = plan.script.split()
    assert "--cuda-mpi" in words and "--mpi" not in words


def test_single_launcher_warns_about_idle_processes(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry,
        "perlmutter-gpu",
        job(
            launcher="single",
            resources={"process_count": 4},
        ),
    )
    assert plan.launcher == "none"
    assert any("starts one process" in w for w in plan.warnings)


def test_unknown_container_fields_are_refused(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry, "perlmutter-gpu", job(container={"image": IMAGE, "colour": "red"})
    )
    assert fields(problems) == ["container.colour"]


def test_runtime_none_runs_bare_and_says_the_image_is_unused(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "perlmutter-gpu", job(container={"image": IMAGE, "runtime": "none"}))
    assert plan.runtime == "none" and plan.image is None
    assert any("is not used" in w for w in plan.warnings)
    assert "podman-hpc" not in plan.script


def test_default_queue_and_walltime(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "perlmutter-gpu", job())
    assert plan.queue == "regular" and plan.shape.walltime_seconds == 3600


def test_counts_are_derived(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry,
        "perlmutter-cpu",
        job(
            launcher="srun",
            resources={"process_count": 10, "processes_per_node": 4},
        ),
    )
    assert (plan.shape.node_count, plan.shape.process_count) == (3, 10)


def test_image_is_translated_per_runtime(registry: ProfileRegistry) -> None:
    shifter = plan_for(
        registry,
        "perlmutter-gpu",
        job(
            container={"image": "docker.io/library/ubuntu:22.04", "runtime": "shifter"},
        ),
    )
    assert shifter.image == "docker:ubuntu:22.04"
    apptainer = plan_for(registry, "frontier", job(container={"image": "ubuntu:22.04"}))
    assert apptainer.image == "docker://docker.io/library/ubuntu:22.04"
    podman = plan_for(registry, "perlmutter-gpu", job(container={"image": "docker://nginx:1"}))
    assert podman.image == "docker.io/library/nginx:1"


def test_short_names_are_qualified_for_every_runtime_and_staging(
    registry: ProfileRegistry,
) -> None:
    """A short name is Docker Hub's, in every runtime's form; podman-hpc's pull gets it too."""
    short = "jhnnsrs/segmentor:0.4.3-cpu"
    hub = "docker.io/jhnnsrs/segmentor:0.4.3-cpu"
    podman_hpc = plan_for(registry, "perlmutter-gpu", job(container={"image": short}))
    assert podman_hpc.image == hub
    assert podman_hpc.pre_submit == [["podman-hpc", "pull", hub]]
    assert f"    {hub} \\\n" in podman_hpc.script
    podman = plan_for(registry, "local", {"executable": "/bin/true", "container": {"image": short}})
    assert podman.image == hub and f" {hub}" in podman.script
    shifter = plan_for(
        registry, "perlmutter-gpu", job(container={"image": short, "runtime": "shifter"})
    )
    assert shifter.image == "docker:jhnnsrs/segmentor:0.4.3-cpu"
    apptainer = plan_for(registry, "frontier", job(container={"image": short}))
    assert apptainer.image == f"docker://{hub}"


def test_image_staging_before_submission(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "perlmutter-gpu", job())
    assert plan.pre_submit == [["podman-hpc", "pull", IMAGE]]
    assert "pull" not in plan.script
