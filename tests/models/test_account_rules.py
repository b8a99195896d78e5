"""Account rules: claims to a login account, first match wins; what a rule may make; the
patterns refused when the profile is read; a crafted claim costs no more than its length."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from iri_gateway.models.account_rules import AccountRule, first_account

RULES = [
    AccountRule(
        claim="email", match=r"(?P<name>[a-z][a-z0-9]*)@lab\.example\.org", account="{name}"
    ),
    AccountRule(claim="groups", match=r"hpc-(?P<team>[a-z]+)", account="svc_{team}"),
    AccountRule(claim="realm_access.roles", match=r"staff", account="staff"),
]


@pytest.mark.parametrize(
    ("claims", "account"),
    [
        ({"email": "alice@lab.example.org", "groups": ["hpc-astro"]}, "alice"),
        ({"email": "alice@elsewhere.org", "groups": ["users", "hpc-astro"]}, "svc_astro"),
        ({"email": "x@elsewhere.org", "realm_access": {"roles": ["staff"]}}, "staff"),
        ({"email": "Alice@lab.example.org"}, None),  # matched whole and case-sensitively
        ({"email": "alice@lab.example.org.evil.com"}, None),
        ({"groups": "hpc-astro"}, "svc_astro"),  # a single value as well as a list
        ({"groups": [7, None, "hpc-bio"]}, "svc_bio"),
        ({}, None),
    ],
)
def test_the_first_rule_that_matches_gives_the_account(
    claims: dict[str, Any], account: str | None
) -> None:
    assert first_account(RULES, claims) == account


def test_a_rule_never_makes_root_nor_a_name_that_is_not_a_login_name() -> None:
    anything = AccountRule(claim="sub", match=r".+", account="{0}")
    assert anything.account_for({"sub": "root"}) is None
    assert anything.account_for({"sub": "bob; rm -rf /"}) is None
    assert anything.account_for({"sub": "../etc"}) is None
    assert anything.account_for({"sub": "x" * 33}) is None
    assert anything.account_for({"sub": "carol"}) == "carol"


@pytest.mark.parametrize(
    ("rule", "reason"),
    [
        ({"claim": "sub", "match": "(", "account": "x"}, "not an RE2 regular expression"),
        ({"claim": "sub", "match": r"(a)\1", "account": "x"}, "invalid escape sequence"),
        ({"claim": "sub", "match": r"a(?=b)", "account": "x"}, "not an RE2"),
        ({"claim": "sub", "match": "(?P<u>.+)", "account": "{user}"}, "not a named group"),
        ({"claim": "sub", "match": "(?P<u>.+)", "account": "{}"}, "not a named group"),
        ({"claim": "sub", "match": "(?P<u>.+)", "account": "{u.x}"}, "not a named group"),
        ({"claim": "a..b", "match": ".+", "account": "{0}"}, "claim"),
        ({"claim": "sub", "match": ".+", "account": "{0}", "extra": 1}, "extra"),
    ],
)
def test_a_rule_the_site_got_wrong_is_refused_naming_why(rule: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        AccountRule.model_validate(rule)


def test_a_pattern_that_backtracks_in_python_matches_in_linear_time() -> None:
    """`(a|aa)+b` on 200 a's: Python's re would try Fibonacci(200) ways; RE2 does not."""
    ambiguous = AccountRule(claim="sub", match=r"(a|aa)+b", account="x")
    assert ambiguous.account_for({"sub": "a" * 200}) is None
    assert ambiguous.account_for({"sub": "a" * 200 + "b"}) == "x"
    assert ambiguous.account_for({"groups": ["a" * 300] * 10_000, "sub": "a" * 300}) is None
