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


def fields(problems: list[Problem]) -> list[str]:
    return [problem.field for problem in problems]
