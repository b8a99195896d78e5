"""Rendering details: directive quoting, site templates, scheduler options, and a real bash run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iri_gateway.errors import TemplateError
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.shell import has_control_characters, slurm_directive_value
from tests.conftest import LAUNCH_LINE, plan_for, site_with_templates

IMAGE = "docker.io/library/ubuntu:22.04"


def slurm_directive_words(line: str) -> list[str]:
    """Split an `#SBATCH` line's options the way sbatch does (its `_get_argument`).

    Single or double quotes group, a backslash escapes the next character inside or outside
    quotes, an unquoted `#` starts a comment, and blanks separate words.
    """
    words: list[str] = []
    i, text = 0, line.removeprefix("#SBATCH")
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        word, quote = "", ""
        while i < len(text) and (quote or not text[i].isspace()):
            char = text[i]
            if char == "\\" and i + 1 < len(text):
                word += text[i + 1]
                i += 2
                continue
            if quote:
                if char == quote:
                    quote = ""
                else:
                    word += char
            elif char in "\"'":
                quote = char
            elif char == "#":
                return [*words, word] if word else words
            else:
                word += char
            i += 1
        words.append(word)
    return words


@given(st.text(min_size=1).filter(lambda s: not has_control_characters(s)))
def test_slurm_directive_values_round_trip(value: str) -> None:
    line = f"#SBATCH --job-name={slurm_directive_value(value)}"
    assert slurm_directive_words(line) == [f"--job-name={value}"]


def test_directive_quoting_examples(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry,
        "testsite-gpu",
        {
            "executable": "/bin/true",
            "name": 'my "big" job #1',
            "stdout_path": "/tmp/out %j 100%.txt",
            "attributes": {"account": "it's", "custom_attributes": {"mail-type": "END,FAIL"}},
            "container": {"image": IMAGE},
        },
    )
    lines = plan.script.splitlines()
    assert '#SBATCH --job-name="my \\"big\\" job #1"' in lines
    assert '#SBATCH --output="/tmp/out %%j 100%%.txt"' in lines
    assert '#SBATCH --account="it\'s"' in lines
    assert "#SBATCH --mail-type=END,FAIL" in lines
    assert "#SBATCH --partition=batch" in lines


def test_walltime_with_days(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry,
        "testsite-gpu",
        {
            "executable": "/bin/true",
            "attributes": {"queue_name": "big", "duration": 86400 + 304},
            "resources": {"node_count": 2},
        },
    )
    assert "#SBATCH --time=1-00:05:04" in plan.script.splitlines()


def test_environment_not_inherited(registry: ProfileRegistry) -> None:
    common: dict[str, Any] = {"executable": "/bin/app", "inherit_environment": False}
    slurm = plan_for(registry, "frontier", {**common, "container": {"image": "/i/a.sif"}})
    assert "#SBATCH --export=NONE" in slurm.script.splitlines()
    assert "--cleanenv" in slurm.script.split()
    shifter = plan_for(
        registry,
        "perlmutter-gpu",
        {
            **common,
            "container": {"image": IMAGE, "runtime": "shifter"},
        },
    )
    assert "--clearenv" in shifter.script.split()
    pbs = plan_for(registry, "polaris", {**common, "container": {"image": "/eagle/a.sif"}})
    assert "#PBS -V" not in pbs.script.splitlines()


def test_memory_exclusive_and_output_on_pbs(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry,
        "polaris",
        {
            "executable": "/bin/app",
            "stdout_path": "/eagle/out.txt",
            "resources": {
                "memory": 2 * 1024**3 + 1,
                "exclusive_node_use": False,
                "processes_per_node": 2,
                "cpu_cores_per_process": 3,
            },
            "attributes": {"reservation_id": "R1234", "account": "proj"},
        },
    )
    lines = plan.script.splitlines()
    assert "#PBS -l select=1:ncpus=6:mpiprocs=2:mem=2049mb" in lines
    assert "#PBS -l place=scatter" in lines
    assert "#PBS -q R1234" in lines and "#PBS -A proj" in lines
    assert "#PBS -o /eagle/out.txt" in lines and "#PBS -j oe" in lines


def test_slurm_memory_and_not_exclusive(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry,
        "testsite-gpu",
        {
            "executable": "/bin/app",
            "resources": {"memory": 1024**3, "exclusive_node_use": False},
        },
    )
    lines = plan.script.splitlines()
    assert "#SBATCH --mem=1024M" in lines
    assert "#SBATCH --exclusive" not in lines


def test_site_template_directory_is_searched_first(tmp_path: Path) -> None:
    profile = site_with_templates(
        tmp_path, {"runtimes/podman.sh.j2": "# site fragment\n" + LAUNCH_LINE}
    )
    registry = ProfileRegistry.from_files([profile])
    plan = make_plan(
        parse_jobspec({"executable": "/bin/app", "container": {"image": IMAGE}}),
        registry.get("testsite-gpu"),
    )
    assert "# site fragment" in plan.script
    assert plan.script.startswith("#!/bin/bash\n#SBATCH"), "built-in slurm.sh.j2 frames it"


def test_broken_site_template_names_the_file(tmp_path: Path) -> None:
    profile = site_with_templates(tmp_path, {"slurm.sh.j2": "#!/bin/bash\n\n{{ no_such_value }}\n"})
    loaded = ProfileRegistry.from_files([profile]).get("testsite-gpu")
    with pytest.raises(TemplateError) as caught:
        make_plan(parse_jobspec({"executable": "/bin/app"}), loaded)
    assert "slurm.sh.j2:3" in str(caught.value) and "no_such_value" in str(caught.value)


def test_missing_templates_dir_is_a_profile_error(tmp_path: Path) -> None:
    from iri_gateway.errors import ProfileError

    profile = site_with_templates(tmp_path, {}, dirname="nope")
    with pytest.raises(ProfileError, match="is not a directory"):
        ProfileRegistry.from_files([profile])


def _run(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = cwd / "job.sh"
    path.write_text(script)
    return subprocess.run(
        ["bash", str(path)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)},
    )


def test_local_script_runs_for_real(registry: ProfileRegistry, tmp_path: Path) -> None:
    """The bare local script: directory, output files, stdin, environment, pre/post launch."""
    work = tmp_path / "work dir"
    work.mkdir()
    (work / "input.txt").write_text("from stdin\n")
    plan = plan_for(
        registry,
        "local",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", 'echo "$GREETING"; cat; echo err >&2; exit 3'],
            "directory": str(work),
            "environment": {"GREETING": "hello 'world' $(not run)"},
            "stdin_path": "input.txt",
            "stdout_path": "out.txt",
            "stderr_path": "err.txt",
            "pre_launch": "echo pre > pre.txt",
            "post_launch": 'echo "post $iri_status" > post.txt',
        },
    )
    result = _run(plan.script, tmp_path)
    assert result.returncode == 3, result.stderr
    assert (work / "out.txt").read_text() == "hello 'world' $(not run)\nfrom stdin\n"
    assert (work / "err.txt").read_text() == "err\n"
    assert (work / "pre.txt").read_text() == "pre\n"
    assert (work / "post.txt").read_text() == "post 3\n"


def test_missing_directory_fails_the_job(registry: ProfileRegistry, tmp_path: Path) -> None:
    plan = plan_for(
        registry,
        "local",
        {
            "executable": "/bin/echo",
            "directory": str(tmp_path / "absent"),
        },
    )
    result = _run(plan.script, tmp_path)
    assert result.returncode == 1
    assert "absent" in result.stderr


def test_rendered_scripts_are_shellcheck_clean_with_every_option(
    registry: ProfileRegistry, tmp_path: Path
) -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is required (scripts/test-all installs it)"
    plan = plan_for(
        registry,
        "frontier",
        {
            "executable": "/bin/app",
            "arguments": ["a b", "$HOME", "*"],
            "name": "x y",
            "directory": "/lustre/orion/x y",
            "environment": {"A": "1 2", "B": "$(x)"},
            "stdin_path": "in put",
            "stdout_path": "o%u",
            "stderr_path": "e",
            "pre_launch": "module load x",
            "post_launch": "echo done",
            "launcher": "srun",
            "resources": {
                "node_count": 2,
                "processes_per_node": 8,
                "gpu_cores_per_process": 1,
                "memory": 10**9,
            },
            "attributes": {
                "duration": 60,
                "account": "abc",
                "reservation_id": "r",
                "custom_attributes": {"signal": "B:USR1@60"},
            },
            "container": {
                "image": "docker://ubuntu:22.04",
                "volume_mounts": [
                    {"source": "/lustre/orion/d", "target": "/d", "read_only": False}
                ],
                "network": "none",
                "workdir": "/d",
                "extra_options": {"apptainer": ["--writable-tmpfs"]},
            },
        },
    )
    path = tmp_path / "job.sh"
    path.write_text(plan.script)
    result = subprocess.run(
        [shellcheck, "-S", "warning", "-s", "bash", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout
    assert "--net --network none" in plan.script
    assert "--bind /lustre/orion/d:/d:rw" in plan.script
