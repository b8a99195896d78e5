"""Shell safety of Slurm's own containers (slurm-oci): arguments and environment through the
real Slurm OCI path, on the running test cluster (no stand-in)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry
from tests.shell_safety.harness import CANARY, canaries, env_names, hostile, scratch

# ---------------------------------------------------------------------------------------------
# Slurm's own containers (slurm-oci): arguments and environment through the real Slurm OCI path
# ---------------------------------------------------------------------------------------------
#
# No stand-in: the script is planned for the test cluster's `cluster-oci` resource and
# submitted with the real sbatch; slurmstepd reads the bundle the script wrote and rootless
# runc starts the image, whose /bin/sh writes every argument and the job's variables,
# NUL-separated, into the job directory (bound into the container as its working directory).

# The variables are written first: the loop's own variable (`a`) may be one of them.
OCI_REPORT = '{names}for a in "$@"; do printf "%s\\0" "$a"; done > args.bin; pwd > cwd.txt'


@pytest.fixture(scope="module")
def oci_resource(tmp_path_factory: pytest.TempPathFactory) -> LoadedResource:
    from tests.integration.conftest import running_cluster, write_cluster_profile

    cluster = running_cluster()
    os.environ["SLURM_CONF"] = str(cluster.slurm_conf)
    profile = write_cluster_profile(cluster, tmp_path_factory.mktemp("oci-profile"))
    return ProfileRegistry.from_files([profile]).get("cluster-oci")


def run_in_slurm_oci(
    resource: LoadedResource, arguments: list[str], environment: dict[str, str]
) -> None:
    """One job through sbatch, srun --container and runc; its program must see exactly
    `arguments` and `environment`, and no payload may run."""
    names = "".join(f'printf "%s\\0" "${{{name}-<unset>}}" >> env.bin; ' for name in environment)
    with scratch() as base:
        base.chmod(0o755)
        directory = base / "job"
        directory.mkdir()
        doc = {
            "executable": "/bin/sh",
            "arguments": ["-c", OCI_REPORT.format(names=names), "sh", *arguments],
            "environment": environment,
            "directory": str(directory),
            "container": {"image": "localhost/iri-test/app:cpu"},
        }
        script = make_plan(parse_jobspec(doc), resource).script
        (base / "job.sh").write_text(script, encoding="utf-8")
        done = subprocess.run(
            ["sbatch", "--wait", "--quiet", str(base / "job.sh")],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=base,
        )
        where = f"{done.stderr}\n{script}"
        assert done.returncode == 0, where
        assert (directory / "cwd.txt").read_text() == f"{directory}\n", where
        recorded = (directory / "args.bin").read_bytes().split(b"\0")[:-1]
        assert [arg.decode("utf-8") for arg in recorded] == arguments, where
        if environment:
            values = (directory / "env.bin").read_bytes().split(b"\0")[:-1]
            assert dict(zip(environment, (v.decode("utf-8") for v in values), strict=True)) == (
                environment
            ), where
        assert canaries(base) == [] and not Path(CANARY).exists(), where


def test_arguments_with_quotes_and_substitutions_reach_a_slurm_oci_container(
    oci_resource: LoadedResource,
) -> None:
    run_in_slurm_oci(
        oci_resource,
        [
            "it's $(whoami)",
            "`touch CANARY`",
            "; touch CANARY #",
            "'; touch CANARY; '",
            "$(touch CANARY)",
            "",
            "--help",
            "*",
            "a\nb",
            "\\",
            "-n",
            '{"x": "\\u0000"}',
        ],
        {},
    )


def test_environment_values_reach_a_slurm_oci_container(oci_resource: LoadedResource) -> None:
    run_in_slurm_oci(
        oci_resource,
        [],
        {
            "GREETING": "line one\nline two",
            "QUOTES": 'it\'s "$(touch CANARY)" `touch CANARY`',
            "EMPTY": "",
            "COMMA": "a,b=c;d",
            "JSONISH": '"\\u0000", "x": [',
        },
    )


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    arguments=st.lists(st.one_of(st.just(""), hostile()), max_size=4),
    environment=st.dictionaries(env_names, st.one_of(st.just(""), hostile()), max_size=3),
)
def test_hostile_arguments_and_environment_reach_a_slurm_oci_container(
    oci_resource: LoadedResource,
    arguments: list[str],
    environment: dict[str, str],
) -> None:
    run_in_slurm_oci(oci_resource, arguments, environment)
