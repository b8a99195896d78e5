"""Job arrays planned (issue 30): the scheduler's rules and limits refuse what it cannot
run, naming the field; each scheduler's script carries the array its own way, and every
element is told its index as IRI_ARRAY_INDEX; `%a` in output paths is the index."""

from __future__ import annotations

from typing import Any

import pytest

from iri_gateway.errors import InvalidJobSpecError, JobRejectedError
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.profiles.loading import ProfileRegistry
from tests.conftest import plan_for

SLURM, PBS, LOCAL = "perlmutter-cpu", "polaris", "local"


def array_job(indices: Any, **extra: Any) -> dict[str, Any]:
    array = {"indices": indices, **extra.pop("array", {})}
    return {"executable": "/bin/true", "array": array, **extra}


def refusals(registry: ProfileRegistry, resource: str, document: dict[str, Any]) -> list[str]:
    with pytest.raises(JobRejectedError) as caught:
        plan_for(registry, resource, document)
    return [f"{p.field}: {p.reason}" for p in caught.value.problems]


def test_slurm_writes_the_array_and_its_throttle_and_percent_a(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry,
        SLURM,
        array_job("0-9:2,15", stdout_path="out-%a-50%.txt", array={"max_concurrent": 3}),
    )
    assert "#SBATCH --array=0-8:2,15%3" in plan.script
    assert "#SBATCH --output=out-%a-50%%.txt" in plan.script, "only %a is the index"
    assert 'export IRI_ARRAY_INDEX="${SLURM_ARRAY_TASK_ID}"' in plan.script
    assert plan.array is not None and plan.array.count == 6
    assert plan.array.index_variable == "SLURM_ARRAY_TASK_ID"


def test_pbs_writes_one_range_with_its_throttle(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry, PBS, array_job("0-8:2", stdout_path="/out/%a.txt", array={"max_concurrent": 2})
    )
    assert "#PBS -J 0-8:2%2" in plan.script
    assert "#PBS -o /out/^array_index^.txt" in plan.script


def test_the_local_script_names_its_array_and_each_elements_files(
    registry: ProfileRegistry,
) -> None:
    plan = plan_for(registry, LOCAL, array_job([1, 2, 3], stdout_path="o-%a"))
    assert plan.script.splitlines()[1] == "#IRI-LOCAL --array=1-3"
    assert 'exec >o-"${IRI_LOCAL_ARRAY_INDEX}"' in plan.script


@pytest.mark.parametrize(
    ("resource", "indices", "reason"),
    [
        (SLURM, "0-1001", "index 1001 is too large: indices here are below 1001"),
        (PBS, "0-10000", "10001 elements are too many: at most 10000"),
        (PBS, "1,5,9-10", "not one range of at least two elements"),
        (PBS, "7", "not one range of at least two elements"),
        (LOCAL, "0-1000", "1001 elements are too many: at most 1000"),
    ],
)
def test_what_the_scheduler_cannot_run_is_refused_naming_the_field(
    registry: ProfileRegistry, resource: str, indices: str, reason: str
) -> None:
    found = refusals(registry, resource, array_job(indices))
    assert any(r.startswith("array.indices: ") and reason in r for r in found), found


def test_the_gateways_variable_is_its_own(registry: ProfileRegistry) -> None:
    found = refusals(registry, LOCAL, array_job("0-3", environment={"IRI_ARRAY_INDEX": "7"}))
    assert found == [
        "environment.IRI_ARRAY_INDEX: set by the gateway for each element of an array "
        "(its index); leave it out"
    ]


def test_an_output_path_without_percent_a_is_a_warning(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, SLURM, array_job("0-3", stdout_path="same.txt"))
    assert any("every element of the array writes to the same file" in w for w in plan.warnings)
    single = plan_for(registry, SLURM, {"executable": "/bin/true", "stdout_path": "x-%a"})
    assert "#SBATCH --output=x-%%a" in single.script
    assert any("this job is not an array" in w for w in single.warnings)


@pytest.mark.parametrize(
    ("array", "reason"),
    [
        ({"indices": "0-9%2"}, "give it as `max_concurrent`"),
        ({"indices": "0-9", "max_concurrent": 0}, "greater than or equal to 1"),
        ({"indices": [3, 3]}, "lists 3 more than once"),
        ({"indices": "0-9", "throttle": 2}, "unknown field"),
    ],
)
def test_bad_arrays_are_refused_when_read(array: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec({"executable": "/x", "array": array})
    assert any(p.field.startswith("array") and reason in p.reason for p in caught.value.problems), (
        caught.value.problems
    )


@pytest.mark.parametrize(
    ("runtime", "image", "option"),
    [
        (
            "podman-hpc",
            "docker.io/library/alpine:3",
            '--env "IRI_ARRAY_INDEX=${SLURM_ARRAY_TASK_ID}"',
        ),
        ("shifter", "docker:library/alpine:3", '"--env=IRI_ARRAY_INDEX=${SLURM_ARRAY_TASK_ID}"'),
    ],
)
def test_every_element_is_told_its_index_inside_its_container(
    registry: ProfileRegistry, runtime: str, image: str, option: str
) -> None:
    """The index is the node's, not the gateway's: a site word the script expands."""
    document = {**array_job("0-3"), "container": {"image": image, "runtime": runtime}}
    plan = plan_for(registry, SLURM, document)
    assert option in plan.script, plan.script


def test_a_cluster_job_cannot_be_an_array() -> None:
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec(
            {
                "container": {"image": "docker.io/library/alpine:3"},
                "roles": [{"name": "worker", "count": 2}],
                "array": {"indices": "0-1"},
            }
        )
    assert any("cannot be an array" in p.reason for p in caught.value.problems)
