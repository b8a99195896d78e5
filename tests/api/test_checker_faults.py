"""The excuse for a query Schemathesis made invalid but never sent holds only when the request
really carried nothing undeclared: an undeclared parameter that was sent stays a failure."""

from __future__ import annotations

from tests.api.checker_faults import Failure, excuse_for, problem_parts

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


def test_a_bulk_launch_refusing_a_spec_at_its_index_is_excused_only_so() -> None:
    """launchJobs answers 200 with the invalid spec refused at its index: excused when every
    field of the refused spec is named below its index, never for an answer with none."""
    answer = [
        {"index": 0, "status": 201, "job": {"id": "j"}},
        {
            "index": 1,
            "status": 422,
            "problem": {
                "detail": "the JobSpec at index 1 is not valid",
                "invalid_params": [
                    {"name": "[1].executable", "reason": "Input should be a string"}
                ],
            },
        },
    ]
    detail, params = problem_parts(answer)
    assert params == (("[1].executable", "Input should be a string"),)
    refused = Failure(
        check="AcceptedNegativeData",
        status=200,
        media_type="application/json",
        detail=detail,
        invalid_params=params,
        message="API accepted schema-violating request",
        token_forced=False,
    )
    excuse = excuse_for(refused)
    assert excuse is not None and excuse.name == "a spec refused at its index"
    assert problem_parts(answer[:1]) == (None, ())
    assert (
        excuse_for(
            Failure(
                check="AcceptedNegativeData",
                status=200,
                media_type="application/json",
                detail=None,
                invalid_params=(("executable", "Input should be a string"),),
                message="API accepted schema-violating request",
                token_forced=False,
            )
        )
        is None
    )
