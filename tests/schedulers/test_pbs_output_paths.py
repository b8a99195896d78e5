"""`#PBS -o`/`-e` are absolute: qsub takes a relative path from the directory qsub runs in
(PBS_O_WORKDIR: the gateway's own, or the login account's home), not from where the script
runs. The real OpenPBS 23.06.06 wrote a job's `stderr.txt` into the gateway's working
directory before this (issue 26); the stand-in never ran a job, so it could not show it."""

from __future__ import annotations

from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry


def directive_lines(document: dict[str, object]) -> list[str]:
    script = make_plan(parse_jobspec(document), ProfileRegistry.builtin().get("polaris")).script
    return [line for line in script.splitlines() if line.startswith(("#PBS -o", "#PBS -e"))]


def test_relative_output_paths_are_taken_from_the_jobs_directory() -> None:
    lines = directive_lines(
        {
            "executable": "/bin/true",
            "directory": "/home/p/run",
            "stdout_path": "out/job.txt",
            "stderr_path": "err.txt",
        }
    )
    assert lines == ["#PBS -o /home/p/run/out/job.txt", "#PBS -e /home/p/run/err.txt"]


def test_absolute_paths_and_a_plan_without_a_directory_are_kept() -> None:
    named = {"executable": "/bin/true", "directory": "/home/p/run", "stdout_path": "/eagle/o.txt"}
    assert directive_lines(named) == ["#PBS -o /eagle/o.txt"]
    assert directive_lines({"executable": "/bin/true", "stdout_path": "o.txt"}) == ["#PBS -o o.txt"]
