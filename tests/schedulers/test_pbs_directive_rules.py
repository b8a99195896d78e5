"""What the real qsub of OpenPBS 23.06.06 misreads in a `#PBS` line is refused at negotiation,
naming the field and what qsub would have done (the real server's answers are checked in
tests/integration/test_pbs_directives_real.py)."""

from __future__ import annotations

from typing import Any

import pytest

from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.schedulers.pbs.directive_rules import (
    AMPERSAND_REASON,
    ASCII_REASON,
    COMMA_REASON,
    DASHES_REASON,
    NAME_REASON,
    SERVER_REASON,
    UNSAFE_REASON,
)
from tests.conftest import plan_for, problems_for


def job(**fields: Any) -> dict[str, Any]:
    return {"executable": "/bin/true", **fields}


@pytest.mark.parametrize(
    ("fields", "path", "reason"),
    [
        ({"name": "a,b"}, "name", NAME_REASON),
        ({"name": "run=1;x"}, "name", NAME_REASON),
        ({"name": "x" * 231}, "name", NAME_REASON),
        ({"name": "--"}, "name", DASHES_REASON),
        ({"attributes": {"account": "--"}}, "attributes.account", DASHES_REASON),
        ({"name": "r\u00e9sum\u00e9"}, "name", ASCII_REASON),
        ({"attributes": {"account": "proj\u00e9"}}, "attributes.account", ASCII_REASON),
        ({"stdout_path": "/tmp/\u65e5\u672c"}, "stdout_path", ASCII_REASON),
        (
            {"attributes": {"custom_attributes": {"filesystems": "home,walltime=99:00:00"}}},
            "attributes.custom_attributes.filesystems",
            COMMA_REASON,
        ),
        (
            {"attributes": {"custom_attributes": {"filesystems": "home&eagle"}}},
            "attributes.custom_attributes.filesystems",
            AMPERSAND_REASON,
        ),
        (
            {"attributes": {"reservation_id": "R1@elsewhere"}},
            "attributes.reservation_id",
            SERVER_REASON,
        ),
    ],
)
def test_what_qsub_misreads_is_refused_with_its_reason(
    registry: ProfileRegistry, fields: dict[str, Any], path: str, reason: str
) -> None:
    problems = problems_for(registry, "polaris", job(**fields))
    assert [(p.field, p.reason) for p in problems] == [(path, reason)]


@pytest.mark.parametrize("name", ["a", "job_1", "v1.2+fix-3", "9lives", "x" * 230, "-leading-dash"])
def test_names_qsub_takes_are_written_as_given(registry: ProfileRegistry, name: str) -> None:
    script = plan_for(registry, "polaris", job(name=name)).script
    assert f"#PBS -N {name}" in script.split("\n")


def test_a_relative_output_path_is_judged_as_pbs_reads_it(registry: ProfileRegistry) -> None:
    """The renderer joins a relative stdout_path to the directory (qsub would read it from
    its own working directory): the joined text is the directive, so a directory of blanks
    and '#' makes that path unwritable in `#PBS -o`; on Slurm (`--chdir`) the same job runs."""
    spec = job(directory="/tmp/run dir #1", stdout_path="out.txt", stderr_path="/tmp/err")
    problems = problems_for(registry, "polaris", spec)
    assert [(p.field, p.reason) for p in problems] == [
        (
            "stdout_path",
            f"{UNSAFE_REASON} (the directive carries '/tmp/run dir #1/out.txt': the path joined "
            "to the directory)",
        )
    ]
    assert plan_for(registry, "frontier", spec).script
    fine = plan_for(registry, "polaris", {**spec, "stdout_path": "/tmp/out.txt"}).script
    assert "cd -- '/tmp/run dir #1' || exit 1" in fine.split("\n")
    joined = plan_for(registry, "polaris", {**spec, "directory": "/tmp/run-1"}).script
    assert "#PBS -o /tmp/run-1/out.txt" in joined.split("\n")


def test_stdin_path_is_no_directive_and_takes_any_text(registry: ProfileRegistry) -> None:
    """The script reads stdin with a quoted `<`; no `#PBS` line carries it, so blanks,
    quotes, '#' and non-ASCII pass (they were refused as directive values before)."""
    path = "/tmp/in put's #1 \u00e9"
    script = plan_for(registry, "polaris", job(stdin_path=path)).script
    assert not any(path in line for line in script.split("\n") if line.startswith("#PBS"))
    assert "< '/tmp/in put'\"'\"'s #1 \u00e9'" in script
