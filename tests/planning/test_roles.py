"""Cluster jobs (JobSpec `roles`): negotiation, precedence, refusals, and the script's shape."""

from __future__ import annotations

import re
from typing import Any

import pytest

from iri_gateway.errors import InvalidJobSpecError
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.negotiate import negotiate
from iri_gateway.planning.placement import place
from iri_gateway.profiles.loading import ProfileRegistry
from tests.conftest import plan_for, problems_for

IMAGE = "docker.io/lab/spark:3"


def spark(**overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": "spark",
        "executable": "/opt/spark/run",
        "arguments": ["--role-default"],
        "container": {"image": IMAGE},
        "environment": {"LEVEL": "job", "SHARED": "job"},
        "attributes": {"duration": 600, "account": "m1234"},
        "roles": [
            {"name": "master", "count": 1},
            {
                "name": "worker",
                "count": 3,
                "environment": {"LEVEL": "role"},
                "arguments": ["--worker"],
            },
        ],
    }
    document.update(overrides)
    return document


def test_members_roles_and_precedence(registry: ProfileRegistry) -> None:
    decision = negotiate(parse_jobspec(spark()), registry.get("perlmutter-gpu"))
    cluster = decision.cluster
    assert cluster is not None
    assert [m.name for m in cluster.members] == ["master1", "worker1", "worker2", "worker3"]
    assert cluster.hosts == "master1,worker1,worker2,worker3" and cluster.size == 4
    master, worker = (role.decision for role in cluster.roles)
    assert decision is master, "the primary member's decision carries the cluster"
    # environment: job < role, and the gateway's own variables
    assert worker.environment["LEVEL"] == "role" and worker.environment["SHARED"] == "job"
    assert master.environment["LEVEL"] == "job"
    assert worker.environment["IRI_CLUSTER_ROLE"] == "worker"
    assert worker.environment["IRI_CLUSTER_SIZE"] == "4"
    # arguments: the role's when given, else the job's
    assert worker.spec.arguments == ["--worker"] and master.spec.arguments == ["--role-default"]
    assert [(r.count, r.per_node, r.node_count) for r in cluster.roles] == [(1, 1, 1), (3, 1, 3)]


def test_role_container_overrides_and_merges(registry: ProfileRegistry) -> None:
    document = spark(
        container={
            "image": IMAGE,
            "volume_mounts": [
                {"source": "/global/cfs/a", "target": "/a"},
                {"source": "/global/cfs/b", "target": "/b"},
            ],
        }
    )
    document["roles"][1]["container"] = {
        "image": "docker.io/lab/worker:3",
        "volume_mounts": [{"source": "/global/cfs/w", "target": "/b"}],
    }
    decision = negotiate(parse_jobspec(document), registry.get("perlmutter-cpu"))
    assert decision.cluster is not None
    master, worker = (role.decision for role in decision.cluster.roles)
    assert master.image == IMAGE and worker.image == "docker.io/lab/worker:3"
    assert {(m.source, m.target) for m in worker.mounts} == {
        ("/global/cfs/a", "/a"),
        ("/global/cfs/w", "/b"),
    }, "same target: the role's mount"


def test_plan_and_slurm_script(registry: ProfileRegistry) -> None:
    document = spark()
    document["roles"][1]["resources"] = {"gpu_cores_per_process": 1, "processes_per_node": 3}
    plan = plan_for(registry, "perlmutter-gpu", document)
    assert plan.cluster is not None
    assert plan.cluster.primary == "master1"
    assert [
        (r.name, r.count, r.members_per_node, r.node_count, r.gpus_per_member)
        for r in plan.cluster.roles
    ] == [("master", 1, 1, 1, 0), ("worker", 3, 3, 1, 1)]
    script = plan.script
    head, _, rest = script.partition("#SBATCH hetjob\n")
    assert "#SBATCH --nodes=1\n#SBATCH --ntasks=1\n" in head
    assert "#SBATCH --ntasks=3\n#SBATCH --ntasks-per-node=3\n#SBATCH --gpus-per-task=1\n" in rest
    assert script.count("#SBATCH hetjob") == 1
    assert script.count("#SBATCH --job-name=spark") == 1, "job-wide lines once"
    # one launch per member, each on its slot's node, with its own index
    launches = re.findall(
        r"srun --het-group=(\d) --nodes=1 --ntasks=1 "
        r'"--nodelist=\$\{iri_nodes_(\d)\[(\d)\]\}"',
        script,
    )
    assert launches == [("0", "0", "0"), ("1", "1", "0"), ("1", "1", "0"), ("1", "1", "0")]
    indexes = re.findall(r"--env IRI_CLUSTER_ROLE_INDEX=(\d)", script)
    assert indexes == ["1", "1", "2", "3"]
    assert script.count('--volume "$iri_cluster_dir/hosts:/etc/hosts:ro"') == 4
    assert 'iri_member worker3 worker 3 "${iri_nodes_1[0]}"' in script
    assert '> "$iri_cluster_dir/worker3.out" 2> "$iri_cluster_dir/worker3.err"' in script
    assert "iri_member_1 &\n" in script, "the primary's output is the job's"


def test_pbs_select_has_a_chunk_per_role(registry: ProfileRegistry) -> None:
    script = plan_for(registry, "polaris", spark()).script
    assert "#PBS -l select=1:ncpus=32:mpiprocs=1+3:ncpus=32:mpiprocs=1\n" in script
    assert 'mapfile -t iri_hosts < "$PBS_NODEFILE"' in script
    assert 'iri_member worker2 worker 2 "${iri_hosts[2]}"' in script
    assert 'mpiexec -n 1 --hosts "${iri_hosts[3]}"' in script
    assert "export APPTAINERENV_IRI_CLUSTER_ROLE_INDEX=3" in script


def test_local_runs_every_member_here(registry: ProfileRegistry) -> None:
    document = spark(container={"image": "docker.io/library/busybox:latest"})
    plan = plan_for(registry, "local", document)
    assert plan.cluster is not None and plan.cluster.size == 4
    assert ".iri-cluster-${IRI_LOCAL_JOB_ID}" in plan.script
    assert "srun" not in plan.script and "podman run --rm" in plan.script


def test_shifter_cannot_bind_the_hosts_file(registry: ProfileRegistry) -> None:
    document = spark()
    document["roles"][1]["container"] = {"runtime": "shifter"}
    problems = problems_for(registry, "perlmutter-cpu", document)
    problem = next(p for p in problems if p.field == "roles[1].container.runtime")
    assert "cannot bind the members' hosts file" in problem.reason
    assert problem.offered == "podman-hpc, none"


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (lambda d: d["roles"][1].update(count=5000), "roles", "the roles take 5001 nodes"),
        (lambda d: d.update(launcher="srun"), "launcher", "every member of a cluster job is one"),
        (
            lambda d: d.update(
                container={
                    "flavours": [
                        {"name": "a", "image": IMAGE, "requirements": {"gpu_count": ">= 2"}}
                    ]
                }
            ),
            "container.flavours[0].requirements",
            "flavour 'a': gpu_count >= 2",
        ),
        (
            lambda d: d["environment"].update(IRI_CLUSTER_SIZE="9"),
            "environment.IRI_CLUSTER_SIZE",
            "set by the gateway",
        ),
        (
            lambda d: d["roles"][1].update(resources={"gpu_cores_per_process": 1}),
            "roles[1].resources.gpu_cores_per_process",
            "GPUs asked",
        ),
        (
            lambda d: d["roles"][1].update(resources={"processes_per_node": 3, "node_count": 2}),
            "roles[1].resources.node_count",
            "take 1 nodes, not 2",
        ),
    ],
)
def test_refusals_name_the_role_field(
    registry: ProfileRegistry, change: Any, field: str, reason: str
) -> None:
    document = spark()
    change(document)
    problems = problems_for(registry, "perlmutter-cpu", document)
    assert any(p.field == field and reason in p.reason for p in problems), problems


def test_a_role_problem_points_at_the_role_or_the_job(registry: ProfileRegistry) -> None:
    document = spark()
    document["roles"][1]["container"] = {"image": "/scratch/bad.sif"}  # not an OCI reference
    fields = [p.field for p in problems_for(registry, "perlmutter-cpu", document)]
    assert "roles[1].container.image" in fields and "container.image" not in fields
    document = spark(container={"image": "/scratch/bad.sif"})
    fields = [p.field for p in problems_for(registry, "perlmutter-cpu", document)]
    assert fields.count("container.image") == 1, "the job's own image is reported once"


def test_cluster_jobs_can_be_switched_off(registry: ProfileRegistry, tmp_path: Any) -> None:
    from tests.conftest import TEST_PROFILE

    profile = tmp_path / "site.yaml"
    profile.write_text(
        TEST_PROFILE.read_text().replace(
            "      kind: slurm\n", "      kind: slurm\n      cluster_jobs: {enabled: false}\n", 1
        )
    )
    off = ProfileRegistry.from_paths([profile])
    document = spark(container={"image": "docker.io/lab/spark:3"}, attributes={"duration": 60})
    problems = problems_for(off, "testsite-gpu", document)
    assert [p.field for p in problems][:1] == ["roles"]
    assert "does not run cluster jobs" in problems[0].reason


@pytest.mark.parametrize(
    ("roles", "message"),
    [
        ([{"name": "worker1", "count": 1}], "do not end in a digit"),
        ([{"name": "Worker", "count": 1}], "lower case"),
        ([{"name": "w", "count": 0}], "greater than or equal to 1"),
        ([{"name": "w", "count": 1}, {"name": "w", "count": 2}], "given twice: w"),
        ([], "at least 1 item"),
    ],
)
def test_role_schema_errors(roles: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec({"executable": "/x", "roles": roles})
    assert any(message in p.reason for p in caught.value.problems), caught.value.problems


# ---- service ports (roles[].ports) ---------------------------------------------------------


def test_every_member_gets_its_own_ports_and_sees_everyones(registry: ProfileRegistry) -> None:
    """Member k of a role listens on base + k - 1; all members see every endpoint."""
    document = spark(
        roles=[
            {"name": "master", "count": 1, "ports": {"rpc": 7077, "ui": 8080}},
            {
                "name": "worker",
                "count": 3,
                "ports": {"ui": 8081},
                "resources": {"processes_per_node": 2},
            },
        ]
    )
    plan = plan_for(registry, "testsite-gpu", document)
    assert plan.cluster is not None
    assert plan.cluster.ports == {
        "master1": {"rpc": 7077, "ui": 8080},
        "worker1": {"ui": 8081},
        "worker2": {"ui": 8082},
        "worker3": {"ui": 8083},
    }
    endpoints = (
        "IRI_CLUSTER_ENDPOINTS=rpc:master1:7077,ui:master1:8080,ui:worker1:8081,"
        "ui:worker2:8082,ui:worker3:8083"
    )
    assert plan.script.count(endpoints) == 4, "every member sees every endpoint"
    members = plan.script.split("iri_member_")[1:]
    bodies = {
        name: next(
            b
            for b in members
            if f"IRI_CLUSTER_ROLE_INDEX={index}" in b and f"IRI_CLUSTER_ROLE={role}" in b
        )
        for name, role, index in [("worker2", "worker", 2), ("master1", "master", 1)]
    }
    assert "IRI_CLUSTER_PORT_UI=8082" in bodies["worker2"]
    assert "IRI_CLUSTER_PORT_RPC" not in bodies["worker2"]
    assert "IRI_CLUSTER_PORT_RPC=7077" in bodies["master1"]
    assert "IRI_CLUSTER_PORT_UI=8080" in bodies["master1"]


def test_a_role_without_ports_has_no_port_variables(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "local", spark())
    assert "IRI_CLUSTER_PORT_" not in plan.script and "IRI_CLUSTER_ENDPOINTS" not in plan.script
    assert plan.cluster is not None and plan.cluster.ports == {}


@pytest.mark.parametrize(
    ("roles", "field", "message"),
    [
        (
            [{"name": "w", "count": 10, "ports": {"http": 65530}}],
            "roles[0]",
            "role 'w': port 'http' 65530 with 10 members reaches 65539",
        ),
        (
            [{"name": "w", "count": 1, "ports": {"http": 65536}}],
            "roles[0].ports.http",
            "less than or equal to 65535",
        ),
        (
            [{"name": "w", "count": 1, "ports": {"http": 0}}],
            "roles[0].ports.http",
            "greater than or equal to 1",
        ),
        (
            [{"name": "w", "count": 1, "ports": {"HTTP": 80}}],
            "roles[0].ports.HTTP.[key]",
            "port name 'HTTP'",
        ),
        (
            [
                {"name": "a", "count": 3, "ports": {"http": 8000}},
                {"name": "b", "count": 1, "ports": {"ui": 8002}},
            ],
            "roles",
            "port 'http' of role 'a' takes 8000-8002 and port 'ui' of role 'b' takes 8002-8002",
        ),
        (
            [{"name": "a", "count": 2, "ports": {"http": 8000, "rpc": 8001}}],
            "roles",
            "port 'http' of role 'a' takes 8000-8001 and port 'rpc' of role 'a' takes 8001-8002",
        ),
        (
            [
                {"name": "a", "count": 50, "ports": {"http": 8000}},
                {"name": "b", "count": 1, "ports": {"ui": 8010}},
                {"name": "c", "count": 1, "ports": {"ui": 8030}},
            ],
            "roles",
            "port 'http' of role 'a' takes 8000-8049 and port 'ui' of role 'b'",
        ),
    ],
)
def test_ports_out_of_range_or_overlapping_are_refused_naming_the_role(
    roles: list[dict[str, Any]], field: str, message: str
) -> None:
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec({"executable": "/x", "roles": roles})
    assert any(p.field == field and message in p.reason for p in caught.value.problems), (
        caught.value.problems
    )


def test_the_highest_base_port_a_role_may_have_is_accepted() -> None:
    spec = parse_jobspec(
        {"executable": "/x", "roles": [{"name": "w", "count": 10, "ports": {"http": 65526}}]}
    )
    assert spec.roles is not None and spec.roles[0].ports == {"http": 65526}


@pytest.mark.parametrize("name", ["IRI_CLUSTER_ENDPOINTS", "IRI_CLUSTER_PORT_HTTP"])
def test_port_variables_are_the_gateways(registry: ProfileRegistry, name: str) -> None:
    document = spark()
    document["roles"][1]["environment"] = {name: "mine"}
    problems = problems_for(registry, "local", document)
    assert [(p.field, p.reason) for p in problems] == [
        (f"roles[1].environment.{name}", "set by the gateway in cluster jobs")
    ]


# ---- cluster_lifecycle ---------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["primary_ends_all", "all_must_end", "first_failure_ends_all"])
def test_the_lifecycle_policy_reaches_plan_and_script(
    registry: ProfileRegistry, policy: str
) -> None:
    plan = plan_for(registry, "testsite-gpu", spark(cluster_lifecycle=policy))
    assert plan.cluster is not None and plan.cluster.lifecycle == policy
    assert f"\niri_lifecycle={policy}\n" in plan.script


def test_the_default_lifecycle_is_primary_ends_all(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "local", spark())
    assert plan.cluster is not None and plan.cluster.lifecycle == "primary_ends_all"
    assert "\niri_lifecycle=primary_ends_all\n" in plan.script


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"executable": "/x", "cluster_lifecycle": "all_must_end"}, "jobs with roles only"),
        (
            {
                "executable": "/x",
                "roles": [{"name": "w", "count": 1}],
                "cluster_lifecycle": "primary_ends",
            },
            "'primary_ends_all', 'all_must_end' or",
        ),
    ],
)
def test_bad_lifecycles_are_refused(document: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec(document)
    assert [p.field for p in caught.value.problems] == ["cluster_lifecycle"]
    assert message in caught.value.problems[0].reason


def test_a_role_container_setting_given_as_null_keeps_the_jobs(registry: ProfileRegistry) -> None:
    """`network: null` in a role's container was passed on to the job's container, which
    takes no null: a 500 from placement (found by Schemathesis on our own OpenAPI)."""
    spec = JobSpec.model_validate(
        {
            "roles": [
                {
                    "name": "a",
                    "count": 1,
                    "executable": "0",
                    "container": {
                        "image": "docker.io/library/bash",
                        "network": None,
                        "workdir": None,
                        "runtime": None,
                        "gpu": None,
                    },
                }
            ]
        }
    )
    answers = place(spec, registry)
    assert answers
