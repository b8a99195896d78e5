"""From a caller's identity to the login account that runs its work on a resource: the rules
a site writes per resource (`connection.ssh.account_rules`, issue 31), as Globus Compute's
multi-user endpoints map identities by rules on their claims rather than by a list.

A rule names a claim, an RE2 pattern its value must match whole, and the account made from
the match's named groups (`{name}`; `{0}`: the whole value); how claims are matched, and
bounded, is `models.claim_rules`'. A claim holding a list (groups) matches when one of its
elements does, the first in order. Rules are tried in order; the first that matches gives
the account; none: the caller has no account there (403, naming nothing of the rules).

The account made must be a plain login name (`ACCOUNT_NAME`) and never `root`: a pattern
that lets a claim's text through whole cannot make a caller someone the site did not mean.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from pydantic import Field

from iri_gateway.models.claim_rules import ClaimRule

ACCOUNT_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
"""A login account the rules may make: POSIX-portable, lower case, at most 32 characters."""
NEVER = frozenset({"root"})
"""Accounts no rule may make."""


class AccountRule(ClaimRule):
    """One rule: `claim` matched whole by `match` gives the account `account`."""

    MADE: ClassVar[str] = "account"

    account: str = Field(
        min_length=1,
        max_length=100,
        description="The login account: text with `{group}` for a named group of `match`, "
        "`{0}` for the whole value; it must come out a plain login name, never root",
    )

    def account_for(self, claims: Mapping[str, Any]) -> str | None:
        """The account this rule gives for `claims`, or None when it does not match (or
        what it makes is not a login name it may make)."""
        for made in self.made(claims):
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
