"""Project membership from a caller's identity claims, per resource (`project_rules`, issue
31): the projects a caller may charge on a resource are its token's own (`Principal.projects`)
and those the resource's rules grant from its claims.

A rule names a claim, an RE2 pattern its value must match whole, and the project made from
the match's named groups (`{name}`; `{0}`: the whole value); how claims are matched, and
bounded, is `models.claim_rules`'. Unlike account rules, which choose one account, EVERY rule
that matches grants its project, and a list claim (groups) grants one project per element
that matches: membership adds up, as a user is in many groups.

The project made must be a plain project name (`PROJECT_NAME`: no '/', no spaces, no shell
or path characters; it is written into storage paths, batch directives, URLs); a rule whose
result is not one grants nothing for that value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import Field

from iri_gateway.models.claim_rules import ClaimRule

PROJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A project the rules may grant: a letter or digit, then letters, digits, `_`, `.`, `-`;
at most 64 characters."""


class ProjectRule(ClaimRule):
    """One rule: each value of `claim` matched whole by `match` grants the project
    `project`."""

    MADE: ClassVar[str] = "project"

    project: str = Field(
        min_length=1,
        max_length=100,
        description="The project granted: text with `{group}` for a named group of `match`, "
        "`{0}` for the whole value; it must come out a plain project name (a letter or digit, "
        "then letters, digits, `_`, `.`, `-`; at most 64 characters), else nothing is granted",
    )

    def projects_for(self, claims: Mapping[str, Any]) -> list[str]:
        """The projects this rule grants for `claims`, in order, each once: one per value of
        the claim it matches whose project is a plain project name."""
        made = (project for project in self.made(claims) if PROJECT_NAME.fullmatch(project))
        return list(dict.fromkeys(made))


def project_grants(
    rules: Sequence[ProjectRule], claims: Mapping[str, Any]
) -> list[tuple[str, int]]:
    """Each project the rules grant for `claims` with the index of the first rule that
    grants it, in the rules' order (`profile check` says which rule granted what)."""
    grants: dict[str, int] = {}
    for index, rule in enumerate(rules):
        for project in rule.projects_for(claims):
            grants.setdefault(project, index)
    return list(grants.items())


@dataclass(frozen=True)
class ResourceProjects:
    """The projects a caller may charge on one resource, and whether the resource grants
    any from claims (a refused caller is told so, never the rules themselves)."""

    resource: str
    """The resource's id."""
    projects: tuple[str, ...]
    """The token's own projects, then those the resource's rules grant, each once."""
    by_rules: bool
    """True when the resource has project rules."""

    def may_charge(self, project: str) -> bool:
        """Only a granted project may be charged; none granted: none may be."""
        return project in self.projects
