"""The excuse for a query Schemathesis made invalid but never sent holds only when the request
really carried nothing undeclared: an undeclared parameter that was sent stays a failure."""

from __future__ import annotations

from tests.api.checker_faults import Failure, excuse_for

MESSAGE = (
    "API accepted schema-violating request\n"
    "Invalid component: in query - violates `additionalProperties` (False)"
)


def accepted(sent: tuple[str, ...] | None, declared: tuple[str, ...] | None) -> Failure:
    return Failure(
        check="AcceptedNegativeData",
        status=200,
        media_type="application/json",
        detail=None,
        invalid_params=(),
        message=MESSAGE,
        token_forced=True,
        query_sent=sent,
        query_declared=declared,
    )


def test_an_undeclared_parameter_dropped_on_the_way_is_excused() -> None:
    excuse = excuse_for(accepted(("include_spec", "limit"), ("include_spec", "limit", "offset")))
    assert excuse is not None and excuse.name == "the invalid query never sent"


def test_an_undeclared_parameter_that_was_sent_is_not_excused() -> None:
    assert excuse_for(accepted(("limit", "x"), ("include_spec", "limit"))) is None


def test_without_the_names_recorded_nothing_is_excused() -> None:
    assert excuse_for(accepted(None, ("limit",))) is None
    assert excuse_for(accepted(("limit",), None)) is None
