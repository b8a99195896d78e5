"""Project rules (issue 31): claims grant projects on a resource. Every rule that matches
grants, a list claim once per element that matches; only plain project names are granted;
a template naming no group of its pattern is refused when the profile is read, naming the
field; a crafted claim costs no more than its length, and an over-long one grants nothing."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from iri_gateway.errors import ProfileError
from iri_gateway.models.claim_rules import LIST_LIMIT, VALUE_LIMIT
from iri_gateway.models.project_rules import ProjectRule, project_grants
from iri_gateway.profiles.loading import ProfileRegistry

RULES = [
    ProjectRule(claim="groups", match=r"hpc-(?P<p>[a-z][a-z0-9]*)", project="{p}"),
    ProjectRule(claim="email", match=r"[a-z]+@(?P<lab>[a-z]+)\.example\.org", project="lab-{lab}"),
    ProjectRule(claim="realm_access.roles", match=r"astro", project="astro"),
]


@pytest.mark.parametrize(
    ("claims", "projects"),
    [
        (
            {"groups": ["users", "hpc-astro", "hpc-bio7"], "email": "ann@phys.example.org"},
            ["astro", "bio7", "lab-phys"],
        ),
        ({"groups": "hpc-astro", "realm_access": {"roles": ["astro"]}}, ["astro"]),
        ({"groups": [7, None, {"a": 1}, "hpc-chem"]}, ["chem"]),
        ({"groups": ["HPC-astro", "hpc-astro.evil", "xhpc-astro"]}, []),  # matched whole
        ({"email": "ann@phys.example.org.evil.com"}, []),
        ({}, []),
    ],
)
def test_every_rule_that_matches_grants_each_element_once(
    claims: dict[str, Any], projects: list[str]
) -> None:
    assert [project for project, _ in project_grants(RULES, claims)] == projects


def test_a_grant_names_the_first_rule_that_made_it() -> None:
    both = [*RULES, ProjectRule(claim="groups", match=r"hpc-.*", project="everyone")]
    grants = project_grants(both, {"groups": ["hpc-astro"], "realm_access": {"roles": ["astro"]}})
    assert grants == [("astro", 0), ("everyone", 3)]


def test_only_plain_project_names_are_granted() -> None:
    anything = ProjectRule(claim="groups", match=r"p:(?P<name>.*)", project="{name}")
    sneaky = ["p:../etc", "p:a/b", "p:a b", "p:$(id)", "p:-rf", "p:.hidden", "p:", "p:x" * 30]
    assert anything.projects_for({"groups": sneaky}) == []
    assert anything.projects_for({"groups": ["p:" + "a" * 65]}) == [], "at most 64 characters"
    assert anything.projects_for({"groups": [*sneaky, "p:m3_x.y-z", "p:m3_x.y-z"]}) == ["m3_x.y-z"]


def test_a_pattern_that_backtracks_in_python_stays_linear_and_long_values_grant_nothing() -> None:
    """`(a|aa)+b` on 200 a's: Python's re would try Fibonacci(200) ways; RE2 does not. A
    value longer than VALUE_LIMIT, or beyond the first LIST_LIMIT elements, is not tried."""
    ambiguous = ProjectRule(claim="groups", match=r"(a|aa)+b", project="fib")
    started = time.perf_counter()
    assert ambiguous.projects_for({"groups": ["a" * 200] * LIST_LIMIT}) == []
    assert time.perf_counter() - started < 2
    assert ambiguous.projects_for({"groups": "a" * 200 + "b"}) == ["fib"]
    assert ambiguous.projects_for({"groups": "a" * VALUE_LIMIT + "b"}) == [], "too long"
    late = [*["x"] * LIST_LIMIT, "ab"]
    assert ambiguous.projects_for({"groups": late}) == [], "only the first LIST_LIMIT elements"
    everything = ProjectRule(claim="sub", match=r".*", project="all")
    assert everything.projects_for({"sub": "x" * (VALUE_LIMIT + 1)}) == []


@pytest.mark.parametrize(
    ("rule", "reason"),
    [
        ({"claim": "g", "match": "(?P<p>.+)", "project": "{team}"}, "project '{team}' uses"),
        ({"claim": "g", "match": "(?P<p>.+)", "project": "{p!r}"}, "not a named group"),
        ({"claim": "g", "match": r"(a)\1", "project": "x"}, "not an RE2 regular expression"),
        ({"claim": "g", "match": ".+", "account": "x"}, "project"),
    ],
)
def test_a_rule_the_site_got_wrong_is_refused_naming_why(rule: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        ProjectRule.model_validate(rule)


PROFILE = """\
facility: {id: site, name: Site}
resources:
  - id: box
    name: box
    scheduler: {kind: local}
    queues: [{name: local, default: true}]
    nodes: {count: 1, cpu: {arch: x86_64, cores: 2}, memory_gib: 4}
    runtimes: {default: none}
    project_rules:
      - {claim: groups, match: 'hpc-(?P<p>[a-z]+)', project: '{p}'}
      - {claim: groups, match: 'hpc-(?P<p>[a-z]+)', project: 'x-{team}'}
"""


def test_a_bad_template_is_refused_when_the_profile_is_read_naming_the_field(
    tmp_path: Path,
) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(PROFILE, encoding="utf-8")
    with pytest.raises(ProfileError) as refused:
        ProfileRegistry.from_files([path])
    message = str(refused.value)
    assert "site.yaml:11: resources[0].project_rules[1]: " in message, message
    assert "project 'x-{team}' uses {team}, which is not a named group" in message
    path.write_text(PROFILE.replace("x-{team}", "x-{p}"), encoding="utf-8")
    box = ProfileRegistry.from_files([path]).get("box").resource
    granted = box.projects_of(("own",), {"groups": ["hpc-astro", "users"]})
    assert granted.projects == ("own", "astro", "x-astro") and granted.by_rules
    assert granted.may_charge("x-astro") and not granted.may_charge("users")
    assert box.project_grants_of({"groups": ["hpc-bio"]}) == [
        ("bio", "project_rules[0] (claim 'groups' matches 'hpc-(?P<p>[a-z]+)')"),
        ("x-bio", "project_rules[1] (claim 'groups' matches 'hpc-(?P<p>[a-z]+)')"),
    ]
