"""The site's limits per token class, without a server: how a token's age is judged (issue
and end times, either missing, both missing), where it may be used from (IPv4, IPv6, an
IPv4 address written as IPv6, an address that is not one), and what `iri-gateway token`
may issue."""

from __future__ import annotations

import pytest

from iri_gateway.service.accounts.auth import AuthenticationError, Principal
from iri_gateway.service.accounts.token_policy import ReadOnlyTokenError, TokenPolicy

NOW = 1_800_000_000.0
HOUR = 3600.0
BOUNDED = TokenPolicy.of(write_lifetime=HOUR, read_lifetime=24 * HOUR)


def writer(**times: float | None) -> Principal:
    return Principal("alice", ("p",), access="write", **times)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("times", "refused"),
    [
        ({"issued": NOW - 60, "expires": NOW + 600}, None),
        ({"issued": NOW - 60, "expires": NOW + 2 * HOUR}, "lives longer"),
        ({"issued": NOW - 2 * HOUR, "expires": None}, "older than"),
        ({"issued": NOW - 60, "expires": None}, None),
        ({"issued": None, "expires": NOW + 600}, None),
        ({"issued": None, "expires": NOW + 2 * HOUR}, "lives longer"),
        ({"issued": None, "expires": None}, "cannot be told"),
    ],
)
def test_a_tokens_age_is_judged_by_what_is_known_of_it(
    times: dict[str, float | None], refused: str | None
) -> None:
    said = BOUNDED.refusal(writer(**times), "127.0.0.1", NOW)
    if refused is None:
        assert said is None
    else:
        assert said is not None and refused in said and "(3600 s)" in said


def test_without_a_bound_any_age_is_taken() -> None:
    assert TokenPolicy().refusal(writer(issued=None, expires=None), None, NOW) is None


@pytest.mark.parametrize(
    ("client", "allowed"),
    [
        ("10.1.2.3", True),
        ("::ffff:10.1.2.3", True),
        ("2001:db8::7", True),
        ("192.168.0.1", False),
        ("not-an-address", False),
        (None, False),
    ],
)
def test_networks_hold_for_the_token_and_for_its_class(client: str | None, allowed: bool) -> None:
    policy = TokenPolicy.of(write_networks=["10.0.0.0/8", "2001:db8::/32"])
    said = policy.refusal(writer(), client, NOW)
    assert (said is None) is allowed, said
    own = Principal("alice", networks=("10.0.0.0/8",))
    assert (TokenPolicy().refusal(own, client, NOW) is None) is (
        allowed and client != "2001:db8::7"
    )


def test_a_read_token_is_refused_a_change_and_a_refusal_comes_first() -> None:
    reader = Principal("alice", access="read", access_hint="ask for another")
    TokenPolicy().check(reader, None, NOW, changes=None)  # a read: served
    with pytest.raises(ReadOnlyTokenError, match=r"DELETE /x changes state.*ask for another"):
        TokenPolicy().check(reader, None, NOW, changes="DELETE /x")
    with pytest.raises(AuthenticationError, match="cannot be told"):
        TokenPolicy.of(read_lifetime=HOUR).check(reader, None, NOW, changes="DELETE /x")


def test_issuing_keeps_to_the_class() -> None:
    assert BOUNDED.lifetime("write", None) == HOUR
    assert BOUNDED.lifetime("read", 600) == 600
    assert TokenPolicy().lifetime("write", None) is None
    with pytest.raises(ValueError, match=r"3600 s at most.*write_token_lifetime"):
        BOUNDED.lifetime("write", 2 * HOUR)
    with pytest.raises(ValueError, match="more than 0"):
        BOUNDED.lifetime("read", 0)
