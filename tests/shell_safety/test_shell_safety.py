"""Shell safety: every user string of a JobSpec reaches its program exactly, never the shell.

The rule under test: a user string (executable, arguments, environment values, directory,
name, image, mount paths, extra options, output paths, container workdir) is either refused
with a Problem on its own field, or arrives where it is meant to go byte for byte, with nothing
in it interpreted by bash, sbatch or the container runtime.

The harness that plans, runs and checks every job is in this folder (harness.py for single
jobs, cluster_harness.py for cluster jobs, slurm_directives.py for what Slurm reads in the
`#SBATCH` lines). This module holds the properties over single jobs, the nastiest cases
spelled out, the refusals, and the package bugs these tests once found, kept as regression
tests; test_shell_safety_cluster.py has the cluster jobs and test_shell_safety_slurm_oci.py
Slurm's own containers on the real test cluster.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iri_gateway.errors import GatewayError
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from tests.shell_safety.harness import (
    CH_COMBO,
    COMBOS,
    CONTAINER_COMBOS,
    CONTROL,
    CONTROLS,
    IDENTIFIER,
    REGISTRY,
    STANDIN_PROGRAMS,
    STDIN_TEXT,
    Combo,
    HostileJob,
    broken_field,
    check_job,
    check_syntax,
    execute,
    expected_refusals,
    hostile,
    hostile_jobs,
    image_for,
    mount_safe,
    mount_source,
    pbs_refuses,
    plan,
    scratch,
)
from tests.shell_safety.slurm_directives import sbatch_options, slurm_output_file
from tests.support.paths import STANDINS


def test_the_pairs_cover_every_runtime_and_scheduler_the_shipped_profiles_offer() -> None:
    reachable = {
        (runtime, loaded.resource.scheduler.kind)
        for loaded in REGISTRY
        for runtime in [*loaded.resource.runtimes.available(), "none"]
    }
    # slurm-oci needs Slurm itself (the bundle is read by slurmstepd): its pairs run on the
    # real test cluster instead (see "Slurm's own containers" below).
    stand_in_pairs = {(combo.runtime, combo.scheduler) for combo in (*COMBOS, CH_COMBO)}
    assert reachable <= stand_in_pairs | {("slurm-oci", "slurm")}


def test_every_standin_says_it_is_one() -> None:
    readme = (STANDINS / "README.md").read_text()
    for name in STANDIN_PROGRAMS:
        lines = (STANDINS / name).read_text().split("\n")
        assert lines[0] == "#!/usr/bin/env python3", name
        assert lines[1].startswith(f"# STAND-IN for {name}: "), name
        assert f"`{name}`" in readme, name


# ---------------------------------------------------------------------------------------------
# The property, and the nastiest cases spelled out
# ---------------------------------------------------------------------------------------------


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=hostile_jobs())
def test_every_user_string_reaches_its_program_exactly(job: HostileJob) -> None:
    check_job(job)


def test_argument_with_a_quote_and_command_substitution_arrives_intact() -> None:
    check_job(
        HostileJob(
            arguments=[
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
            ],
            parallel=True,
            mpi=True,
        )
    )


def test_environment_value_with_a_newline_arrives_intact() -> None:
    check_job(
        HostileJob(
            environment={
                "GREETING": "line one\nline two",
                "QUOTES": 'it\'s "$(touch CANARY)" `touch CANARY`',
                "EMPTY": "",
                "COMMA": "a,b=c;d",
                "DOLLARS": "$HOME:${PATH}:$NOPE",  # ch-run expands these unless --env-no-expand
            }
        )
    )


def test_executable_path_with_a_space_and_a_quote_runs() -> None:
    check_job(
        HostileJob(
            executable_name='my prog\'s "v2" $(touch CANARY)',
            directory_name="run dir; touch CANARY #",
            workdir="/work dir/it's $(touch CANARY)",
            mounts=[("data set's $(touch CANARY)", "in put #1", True)],
            sif_name="it's an image",
            stdout_name="out file's %j",
        )
    )


# ---------------------------------------------------------------------------------------------
# Refusals: what runtimes or directive lines cannot carry is refused on its own field
# ---------------------------------------------------------------------------------------------

OCI_ALPHABET = re.compile(r"[^A-Za-z0-9._:/@+-]")


@settings(max_examples=120, deadline=None)
@given(
    text=hostile(),
    shape=st.sampled_from(
        ["@", "ubuntu:@", "@/app:1.0", "registry.example.org/@", "@app", "docker://@"]
    ),
)
def test_oci_image_names_cannot_carry_hostile_text(text: str, shape: str) -> None:
    """OCI names follow a strict grammar: hostile text is refused on `container.image`.
    (References that start with '-': test_image_that_reads_as_an_option_is_refused.)"""
    image = shape.replace("@", text)
    for combo in CONTAINER_COMBOS:
        if combo.takes_file_images and image.startswith(("/", "oras://", "library://", "shub://")):
            continue  # for Apptainer a file path or a non-OCI URI, not an OCI name
        planned, fields = plan(
            {"executable": "/bin/true", "container": {"runtime": combo.runtime, "image": image}},
            combo,
        )
        if planned is not None:
            check_syntax(planned.script)
        if OCI_ALPHABET.search(image):
            assert planned is None and "container.image" in fields, (combo, image, fields)


FORBIDDEN_IN_MOUNTS = (":", ",", ";", "\n", "\t", "\r", "\x01", "\x7f", "/../")


@settings(max_examples=80, deadline=None)
@given(
    before=mount_safe(),
    bad=st.sampled_from(FORBIDDEN_IN_MOUNTS),
    after=mount_safe(),
    good=mount_safe(),
    where=st.sampled_from(["source", "target", "outside"]),
    read_only=st.booleans(),
)
def test_mount_paths_runtimes_cannot_express_are_refused(
    before: str, bad: str, after: str, good: str, where: str, read_only: bool
) -> None:
    for combo in CONTAINER_COMBOS:
        broken = f"/{before}{bad}{after}"
        source = {"source": mount_source(broken.lstrip("/"), combo), "outside": "/etc/" + good}.get(
            where, mount_source(good, combo)
        )
        target = broken if where == "target" else "/" + good
        doc = {
            "executable": "/bin/true",
            "container": {
                "runtime": combo.runtime,
                "image": image_for(HostileJob(), combo),
                "volume_mounts": [{"source": source, "target": target, "read_only": read_only}],
            },
        }
        planned, fields = plan(doc, combo)
        field_name = "source" if where == "outside" else where
        assert planned is None, (combo, source, target)
        assert fields == [f"container.volume_mounts[0].{field_name}"], (combo, fields)


@settings(max_examples=80, deadline=None)
@given(
    option=st.one_of(
        hostile(),
        st.tuples(
            st.sampled_from(
                [
                    "--writable-tmpfs",
                    "--no-home",
                    "--cvmfs",
                    "--read-only",
                    "--module=cvmfs",
                    "--tmpfs=/x",
                    "--shm-size=1g",
                ]
            ),
            hostile(),
        ).map("".join),
    )
)
def test_extra_options_off_the_allow_list_are_refused(option: str) -> None:
    for combo in CONTAINER_COMBOS:
        config = combo.config
        assert config is not None
        if any(re.fullmatch(pattern, option) for pattern in config.allowed_extra_options):
            continue  # on the list: it is passed as one quoted word (see the property above)
        doc = {
            "executable": "/bin/true",
            "container": {
                "runtime": combo.runtime,
                "image": image_for(HostileJob(), combo),
                "extra_options": {combo.runtime: [option]},
            },
        }
        planned, fields = plan(doc, combo)
        assert planned is None, (combo, option)
        assert fields == [f"container.extra_options.{combo.runtime}[0]"], (combo, fields)


def test_a_hostile_extra_option_is_refused() -> None:
    for combo in CONTAINER_COMBOS:
        doc = {
            "executable": "/bin/true",
            "container": {
                "runtime": combo.runtime,
                "image": image_for(HostileJob(), combo),
                "extra_options": {combo.runtime: ["--no-home; touch CANARY", "--privileged"]},
            },
        }
        _, fields = plan(doc, combo)
        assert fields == [
            f"container.extra_options.{combo.runtime}[0]",
            f"container.extra_options.{combo.runtime}[1]",
        ], combo


@settings(max_examples=60, deadline=None)
@given(name=hostile().filter(lambda name: IDENTIFIER.fullmatch(name) is None))
def test_environment_names_that_are_not_identifiers_are_refused(name: str) -> None:
    for combo in COMBOS:
        planned, fields = plan({"executable": "/bin/true", "environment": {name: "x"}}, combo)
        assert planned is None and fields == [f"environment.{name}"], (combo, fields)


SLURM_WORDS = ("hetjob", "PackJob")
DIRECTIVE_KEYS = ("name", "directory", "stdout_path", "stderr_path", "attributes.account")


def directive_text() -> Any:
    return hostile(exclude=CONTROLS, extra=SLURM_WORDS)


def pbs_safe(text: str) -> str:
    """`text` without what PBS directive lines cannot carry (see `pbs_refuses`): what is left
    passes as a job name and as a path (letters, digits, '_+.-' and '/')."""
    return re.sub(r"[^A-Za-z0-9_+./-]", "", text) or "x"


@settings(max_examples=100, deadline=None, report_multiple_bugs=False)
@given(
    name=directive_text(),
    directory=directive_text(),
    stdout=directive_text(),
    stderr=directive_text(),
    account=directive_text(),
    broken=broken_field(DIRECTIVE_KEYS),
)
def test_directive_values_are_refused_or_read_back_exactly(
    name: str,
    directory: str,
    stdout: str,
    stderr: str,
    account: str,
    broken: tuple[str, str] | None,
) -> None:
    """#SBATCH and #PBS lines: a value is refused (control characters; on PBS also blanks,
    quotes, '\\', '#' and ':' in paths) or read by the scheduler as exactly the value given,
    output file names included."""
    values = {
        "name": name,
        "directory": "/" + directory,
        "stdout_path": "/" + stdout,
        "stderr_path": "/" + stderr,
        "attributes.account": account,
    }
    if broken is not None:
        values[broken[0]] += broken[1]
    for resource_id in ("perlmutter-gpu", "frontier", "polaris", "aurora", "local"):
        combo = Combo(resource_id, "none")
        check_directives(combo, values)
        if combo.scheduler == "pbs" and broken is None:
            check_directives(combo, {key: pbs_safe(value) for key, value in values.items()})


def check_directives(combo: Combo, values: dict[str, str]) -> None:
    doc: dict[str, Any] = {
        "executable": "/bin/true",
        "attributes": {"account": values["attributes.account"]},
    }
    doc.update({key: value for key, value in values.items() if "." not in key})
    refused = expected_refusals(doc, combo)
    account = values["attributes.account"]
    if (
        CONTROL.search(account)
        or (combo.scheduler == "pbs" and pbs_refuses("attributes.account", account))
        or (combo.scheduler == "slurm" and re.search("hetjob|packjob", account, re.I))
    ):
        refused.add("attributes.account")
    planned, fields = plan(doc, combo)
    if refused:
        assert planned is None and set(fields) == refused, (combo, fields, refused)
        return
    assert planned is not None, (combo, fields)
    if combo.scheduler == "slurm":
        options = sbatch_options(planned.script)
        assert options["job-name"] == [doc["name"]]
        assert options["chdir"] == [doc["directory"]]
        assert options["account"] == [account]
        assert [slurm_output_file(p) for p in options["output"]] == [doc["stdout_path"]]
        assert [slurm_output_file(p) for p in options["error"]] == [doc["stderr_path"]]
    elif combo.scheduler == "pbs":
        lines = planned.script.split("\n")
        for line in (
            f"#PBS -N {doc['name']}",
            f"#PBS -A {account}",
            f"#PBS -o {doc['stdout_path']}",
            f"#PBS -e {doc['stderr_path']}",
        ):
            assert line in lines, (combo, line)
    check_syntax(planned.script)


@pytest.mark.parametrize("key", ["name", "directory", "stdout_path", "stderr_path"])
def test_control_characters_in_directive_values_are_refused(key: str) -> None:
    for combo in COMBOS:
        value = "/tmp/a\nb" if key != "name" else "a\n#SBATCH --uid=0"
        planned, fields = plan({"executable": "/bin/true", key: value}, combo)
        assert planned is None and fields == [key], (combo, fields)


# ---------------------------------------------------------------------------------------------
# Package bugs these tests found, fixed since: each case kept as a regression test
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("resource_id", ["perlmutter-gpu", "frontier"])
def test_slurm_directive_value_containing_hetjob_is_refused_or_kept_whole(
    resource_id: str,
) -> None:
    """sbatch starts a new heterogeneous-job component at any #SBATCH line that contains
    'hetjob' or 'packjob', in any case and even inside quotes."""
    doc = {
        "executable": "/bin/true",
        "name": "nightly-hetjob-run",
        "directory": "/pscratch/u/repackjob",
    }
    planned, _ = plan(doc, Combo(resource_id, "none"))
    if planned is not None:
        options = sbatch_options(planned.script)
        assert options["job-name"] == [doc["name"]]


@pytest.mark.parametrize("resource_id", ["perlmutter-gpu", "frontier"])
def test_slurm_output_path_with_a_backslash_is_refused_or_written_where_asked(
    resource_id: str,
) -> None:
    """slurmstepd strips every backslash from an output pattern that holds one (and then
    leaves '%%' doubled): the file lands elsewhere."""
    doc = {"executable": "/bin/true", "stdout_path": "/pscratch/u/a\\b/out-100%.txt"}
    planned, _ = plan(doc, Combo(resource_id, "none"))
    if planned is not None:
        written = [slurm_output_file(p) for p in sbatch_options(planned.script)["output"]]
        assert written == [doc["stdout_path"]]


@pytest.mark.parametrize(
    "combo", [Combo("local", "podman"), Combo("perlmutter-gpu", "podman-hpc")], ids=str
)
def test_image_that_reads_as_an_option_is_refused(combo: Combo) -> None:
    """`-v/etc` passes the OCI grammar (a registry host may contain '-'), and lands on the
    podman command line where the image should be: podman reads `-v /etc` and takes the
    user's first argument as the image."""
    planned, fields = plan(
        {
            "executable": "/bin/echo",
            "arguments": ["hi"],
            "container": {"runtime": combo.runtime, "image": "-v/etc"},
        },
        combo,
    )
    assert planned is None and "container.image" in fields, planned and planned.script


@pytest.mark.parametrize("where", ["arguments", "environment", "executable"])
def test_nul_in_a_user_string_is_refused(where: str) -> None:
    """A NUL cannot be passed in argv or the environment, and bash will not run a script that
    holds one ('cannot execute binary file'): the job must be refused, not rendered."""
    doc: dict[str, Any] = {"executable": "/bin/echo"}
    if where == "arguments":
        doc["arguments"] = ["a\x00b"]
    elif where == "environment":
        doc["environment"] = {"K": "a\x00b"}
    else:
        doc["executable"] = "/bin/ec\x00ho"
    with pytest.raises(GatewayError):
        make_plan(parse_jobspec(doc), REGISTRY.get("local"))


@pytest.mark.parametrize(
    "combo", [Combo("local", "podman"), Combo("perlmutter-gpu", "podman-hpc")], ids=str
)
def test_stdin_path_reaches_podman(combo: Combo) -> None:
    """`podman run` without -i/--interactive gives the container end-of-file on stdin, so
    `podman run ... < stdin_path` never feeds the file to the program."""
    with scratch() as base:
        run = execute(HostileJob(stdin_name="input.txt"), combo, base)
    assert run.process.returncode == 0, run.process.stderr
    assert [seen["stdin"] for seen in run.recorded] == [STDIN_TEXT], run.plan.script


@pytest.mark.parametrize(
    "combo", [Combo("frontier", "none"), Combo("frontier", "apptainer")], ids=str
)
def test_environment_reaches_srun_tasks_without_inherit_environment(combo: Combo) -> None:
    """With inherit_environment false the script says `#SBATCH --export=NONE`; sbatch then
    sets SLURM_EXPORT_ENV=NONE in the job, srun reads it as its own --export default, and the
    variables the script exports (the job's, APPTAINERENV_*) never reach the tasks."""
    job = HostileJob(environment={"GREETING": "hello"}, parallel=True, inherit_environment=False)
    with scratch() as base:
        run = execute(job, combo, base)
    assert run.process.returncode == 0, run.process.stderr
    assert [seen["env"].get("GREETING") for seen in run.recorded] == ["hello"], run.plan.script


def test_job_directory_cannot_add_apptainer_binds_through_the_site_pwd() -> None:
    """Frontier's profile once set APPTAINER_BINDPATH="...,${PWD}" while the gateway refuses
    no ',' or ':' in `directory`: a directory named `.../data,/opt` bound the host's /opt,
    outside the mount allow-list. The site binds must stay exactly the profile's own
    (Apptainer binds the working directory by itself)."""
    combo = Combo("frontier", "apptainer")
    with scratch() as base:
        run = execute(HostileJob(directory_name="data,/opt"), combo, base)
    assert run.process.returncode == 0, run.process.stderr
    binds = run.runtime_record()["container"]["env_binds"]
    assert binds == ["/usr/share/libdrm", "/var/spool/slurmd", "/opt/cray"], run.plan.script


@pytest.mark.parametrize("name", ["UID", "EUID", "PPID", "_"])
def test_environment_name_bash_cannot_export_is_refused_or_delivered(name: str) -> None:
    """Runtime none exports the job's variables in the script's own bash: bash's read-only
    variables (UID, EUID, PPID) cannot be exported, and bash sets `_` to the program's path
    itself, so the program never sees the values asked for."""
    combo = Combo("local", "none")
    planned, _ = plan({"executable": "/bin/true", "environment": {name: "12345"}}, combo)
    if planned is None:
        return
    with scratch() as base:
        run = execute(HostileJob(environment={name: "12345"}), combo, base)
    assert [seen["env"].get(name) for seen in run.recorded] == ["12345"], run.process.stderr
