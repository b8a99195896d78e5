"""Shared fixtures: the shipped profiles, the test site profile, JobSpec and plan helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from iri_gateway.errors import JobRejectedError, Problem
from iri_gateway.jobspec_io import parse_jobspec
from iri_gateway.models.plan import Plan
from iri_gateway.planner import make_plan
from iri_gateway.profiles import ProfileRegistry

TESTS = Path(__file__).parent
TEST_PROFILE = TESTS / "profiles" / "testsite.yaml"


@pytest.fixture(scope="session")
def registry() -> ProfileRegistry:
    """The shipped profiles plus the test site."""
    return ProfileRegistry.from_paths(
        [*sorted(ProfileRegistry.builtin_files()), TEST_PROFILE]
    )


def plan_for(registry: ProfileRegistry, resource: str, document: dict[str, Any]) -> Plan:
    """Validate `document` as a JobSpec and plan it on `resource`."""
    return make_plan(parse_jobspec(document), registry.get(resource))


def problems_for(
    registry: ProfileRegistry, resource: str, document: dict[str, Any]
) -> list[Problem]:
    """The problems negotiation reports; fails the test when the job is accepted."""
    with pytest.raises(JobRejectedError) as caught:
        plan_for(registry, resource, document)
    return caught.value.problems


def site_with_templates(folder: Path, templates: dict[str, str], dirname: str = "tpl") -> Path:
    """A copy of the test site profile whose `testsite-gpu` uses a folder of site templates.

    `templates` maps relative template paths (e.g. `runtimes/podman.sh.j2`) to their text;
    an empty mapping names a folder that does not exist. Returns the profile file.
    """
    for relative, text in templates.items():
        path = folder / dirname / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    profile = folder / "site.yaml"
    profile.write_text(TEST_PROFILE.read_text().replace(
        "    name: Test GPU cluster\n",
        f"    name: Test GPU cluster\n    templates_dir: {dirname}\n",
    ))
    return profile


LAUNCH_LINE = (
    "{{ [launcher, [rt.executable] + rt.options, [rt.image], rt.command] | shlines }}\n"
)


def fields(problems: list[Problem]) -> list[str]:
    return [problem.field for problem in problems]
