"""What the site's rules on a caller's identity claims share (issue 31): the account rules
(`account_rules`: claims -> the login account) and the project rules (`project_rules`:
claims -> projects the caller may charge).

A rule names a claim (a dotted name reaches into objects: `realm_access.roles`), a pattern
the claim's value must match whole, and a template made from the match's named groups
(`{name}`; `{0}`: the whole value). A claim holding a list (groups) is matched element by
element, in order. What a rule of each kind does with what it makes (the first, or every
one) and what it may make (a login name, a project name) is its own module's.

The patterns are the site's, the values the identity provider's (an e-mail address a user
chose, say), matched in the serving process: so they are RE2 patterns (Google's engine,
`google-re2`), which match in time linear in the value whatever the pattern; Python's `re`
backtracks, and `(a|aa)+b` on 200 characters would never end. RE2 has no back-references
nor look-arounds: such a pattern is refused when the profile is read, in RE2's words. A
value is matched only up to `VALUE_LIMIT` characters, and a list only to its first
`LIST_LIMIT` elements, all the same.
"""

from __future__ import annotations

import string
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import re2  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

VALUE_LIMIT = 256
"""Characters of a claim's value that are matched at most (longer: no match)."""
LIST_LIMIT = 200
"""Elements of a list claim that are tried at most."""


def _compiled(pattern: str) -> Any:
    """`pattern` compiled by RE2, its errors as exceptions only (not also logged)."""
    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)


class ClaimRule(BaseModel):
    """One rule: `claim` matched whole by `match` makes the text of the field `MADE`, a
    template of the match's named groups (each kind of rule names its own field)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    MADE: ClassVar[str]
    """The name of the rule's template field (`account`, `project`)."""

    claim: str = Field(
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9_:-]+(\.[A-Za-z0-9_:-]+)*$",
        description="The claim to match (a dotted name reaches into objects, e.g. "
        "`realm_access.roles`); a list claim is matched element by element",
    )
    match: str = Field(
        min_length=1,
        max_length=500,
        description="A regular expression (RE2 syntax: no back-references nor "
        "look-arounds) the claim's value must match whole; its named groups fill the template",
    )

    _pattern: Any = PrivateAttr(default=None)
    """`match` compiled (RE2), made when the rule is validated."""

    @model_validator(mode="after")
    def _pattern_and_template(self) -> ClaimRule:
        try:
            compiled = _compiled(self.match)
        except re2.error as error:
            reason = (
                error.args[0].decode() if error.args and isinstance(error.args[0], bytes) else error
            )
            raise ValueError(
                f"match {self.match!r} is not an RE2 regular expression: {reason}"
            ) from None
        self._pattern = compiled
        names = set(compiled.groupindex) | {"0"}
        template = self._template()
        for _, field, spec, conversion in string.Formatter().parse(template):
            if field is None:
                continue
            if field not in names or spec or conversion:
                raise ValueError(
                    f"{self.MADE} {template!r} uses {{{field}}}, which is not a named group "
                    f"of match (it has: {', '.join(sorted(names))})"
                )
        return self

    def _template(self) -> str:
        template: str = getattr(self, self.MADE)
        return template

    def made(self, claims: Mapping[str, Any]) -> Iterator[str]:
        """The template filled in for each value of the claim `match` matches whole, in
        order (a list claim's elements; bounded); what is made is not yet checked."""
        template = self._template()
        for value in _values(_claim(claims, self.claim)):
            found = self._pattern.fullmatch(value)
            if found is not None:
                yield template.format(found.group(0), **found.groupdict(default=""))

    def described(self, index: int) -> str:
        """The rule as `profile check` names it: which one, its claim and its pattern."""
        return f"{self.MADE}_rules[{index}] (claim {self.claim!r} matches {self.match!r})"


def _claim(claims: Mapping[str, Any], name: str) -> Any:
    value: Any = claims
    for part in name.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _values(value: Any) -> list[str]:
    """The texts a claim holds, in order: itself, or a list's elements; bounded."""
    items = value[:LIST_LIMIT] if isinstance(value, list) else [value]
    return [item for item in items if isinstance(item, str) and len(item) <= VALUE_LIMIT]
