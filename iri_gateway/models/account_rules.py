"""From a caller's identity to the login account that runs its work on a resource: the rules
a site writes per resource (`connection.ssh.account_rules`, issue 31), as Globus Compute's
multi-user endpoints map identities by rules on their claims rather than by a list.

A rule names a claim (a dotted name reaches into objects: `realm_access.roles`), a pattern
the claim's value must match whole, and the account made from the match's named groups
(`{name}`; `{0}`: the whole value). A claim holding a list (groups) matches when one of its
elements does, the first in order. Rules are tried in order; the first that matches gives
the account; none: the caller has no account there (403, naming nothing of the rules).

The account made must be a plain login name (`ACCOUNT_NAME`) and never `root`: a pattern
that lets a claim's text through whole cannot make a caller someone the site did not mean.
The patterns are the site's, the values the identity provider's (an e-mail address a user
chose, say), matched in the serving process: so they are RE2 patterns (Google's engine,
`google-re2`), which match in time linear in the value whatever the pattern; Python's `re`
backtracks, and `(a|aa)+b` on 200 characters would never end. RE2 has no back-references
nor look-arounds: such a pattern is refused when the profile is read, in RE2's words. A
value is matched only up to `VALUE_LIMIT` characters all the same.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

import re2  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

ACCOUNT_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
"""A login account the rules may make: POSIX-portable, lower case, at most 32 characters."""
NEVER = frozenset({"root"})
"""Accounts no rule may make."""
VALUE_LIMIT = 256
"""Characters of a claim's value that are matched at most (longer: no match)."""
LIST_LIMIT = 200
"""Elements of a list claim that are tried at most."""


def _compiled(pattern: str) -> Any:
    """`pattern` compiled by RE2, its errors as exceptions only (not also logged)."""
    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)


class AccountRule(BaseModel):
    """One rule: `claim` matched whole by `match` gives the account `account`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    claim: str = Field(
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9_:-]+(\.[A-Za-z0-9_:-]+)*$",
        description="The claim to match (a dotted name reaches into objects, e.g. "
        "`realm_access.roles`); a list claim matches when one of its elements does",
    )
    match: str = Field(
        min_length=1,
        max_length=500,
        description="A regular expression (RE2 syntax: no back-references nor "
        "look-arounds) the claim's value must match whole; its named groups make the account",
    )
    account: str = Field(
        min_length=1,
        max_length=100,
        description="The login account: text with `{group}` for a named group of `match`, "
        "`{0}` for the whole value; it must come out a plain login name, never root",
    )

    _pattern: Any = PrivateAttr(default=None)
    """`match` compiled (RE2), made when the rule is validated."""

    @model_validator(mode="after")
    def _pattern_and_template(self) -> AccountRule:
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
        for _, field, spec, conversion in string.Formatter().parse(self.account):
            if field is None:
                continue
            if field not in names or spec or conversion:
                raise ValueError(
                    f"account {self.account!r} uses {{{field}}}, which is not a named group "
                    f"of match (it has: {', '.join(sorted(names))})"
                )
        return self

    def account_for(self, claims: Mapping[str, Any]) -> str | None:
        """The account this rule gives for `claims`, or None when it does not match (or
        what it makes is not a login name it may make)."""
        for value in _values(_claim(claims, self.claim)):
            found = self._pattern.fullmatch(value)
            if found is None:
                continue
            made = self.account.format(found.group(0), **found.groupdict(default=""))
            if ACCOUNT_NAME.fullmatch(made) and made not in NEVER:
                return made
        return None


def first_account(rules: Sequence[AccountRule], claims: Mapping[str, Any]) -> str | None:
    """The account of the first rule that matches `claims`; None when none does."""
    found = first_match(rules, claims)
    return found[1] if found is not None else None


def first_match(rules: Sequence[AccountRule], claims: Mapping[str, Any]) -> tuple[int, str] | None:
    """The index of the first rule that matches `claims` and the account it gives; None
    when none does (`profile check` says which rule decided)."""
    for index, rule in enumerate(rules):
        account = rule.account_for(claims)
        if account is not None:
            return index, account
    return None


def _claim(claims: Mapping[str, Any], name: str) -> Any:
    value: Any = claims
    for part in name.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _values(value: Any) -> list[str]:
    """The texts a claim holds, in order: itself, or a list's elements; bounded."""
    items = value[:LIST_LIMIT] if isinstance(value, list) else [value]
    return [item for item in items if isinstance(item, str) and len(item) <= VALUE_LIMIT]
