"""The one table of Schemathesis failures excused as faults of the checker, not the gateway.

Both Schemathesis runs against our own OpenAPI use it: `test_own_conformance.py` (in-process,
every default check) and `test_iri_verification.py` (the IRI harness's run, with both
Schemathesis versions, against our OpenAPI and the official spec). Each excuse is a rule on
what failed (`Failure`: the check's failure class, the answer's status, media type and
problem, the check's own words), with the reason it is the checker's fault and not ours. A
failure no rule excuses fails the run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from iri_gateway.api.plumbing.problems import REQUEST_NOT_VALID

PROBLEM_JSON = "application/problem+json"


@dataclass(frozen=True)
class Failure:
    """One failed check, as either run sees it."""

    check: str
    """Schemathesis's failure class (`RejectedPositiveData`, `AcceptedNegativeData`, ...)."""
    status: int
    media_type: str
    detail: str | None
    invalid_params: tuple[tuple[str, str], ...]
    """The problem's `(name, reason)` pairs."""
    message: str
    """The check's own words (e.g. which part of the request it made invalid)."""
    token_forced: bool
    """True when a hook put the bearer token on every request (the IRI harness does)."""
    query_sent: tuple[str, ...] | None = None
    """The names of the query parameters the request really carried (None: not recorded)."""
    query_declared: tuple[str, ...] | None = None
    """The names of the query parameters the operation declares (None: not recorded)."""


@dataclass(frozen=True)
class Excuse:
    name: str
    reason: str
    applies: Callable[[Failure], bool]


CROSS_FIELD_RULES: dict[str, str] = {
    r"role [^:]+: min \d+ is above max \d+": "a cluster template role's `min` above its "
    "`max`: JSON Schema cannot compare one field with another",
    r"role [^:]+: count \d+ is outside min\.\.max \(\d+\.\.\d+\)": "a role's `count` "
    "outside its own `min`..`max`: the same",
    r"(role|flavour) names must be unique; given twice: .*": "roles (or flavours) with one "
    "name twice: JSON Schema's `uniqueItems` compares whole items, not one property of them",
    r"requirements\[\d+\]: fact .* is given twice": "a flavour's requirements naming one "
    "fact twice: the same, for one property of the items",
    r"requirement [^:]*: .*": "a flavour requirement's constraint is a small expression "
    "(`'>= 2'`, `'> 11'`) on a fact the resource may not know: a grammar, not a schema",
    r"image is required unless flavours are given": "a container's `image` required when "
    "its `flavours` are empty or absent: one field's presence depending on another's",
    r"cluster_lifecycle applies to jobs with roles only.*": "`cluster_lifecycle` without "
    "`roles`: one field's presence depending on another's",
    r".*: (unknown arm variant .*|arm64 has only the variant v8)": "a platform's variant "
    "depends on its arch (`arm/v7`, `arm64/v8`): one part of the string on another",
    r"role '[^']*': port '[^']*' \d+ with \d+ members reaches \d+ .*": "a role's port plus "
    "its member count past 65535 (member k listens on port + k - 1): one field's bound "
    "depending on another's value",
    r"port '[^']*' of role '[^']*' takes \d+-\d+ and port '[^']*' of role '[^']*' takes "
    r"\d+-\d+ .*no two ports may overlap": "two roles' port ranges (base to base + count - 1) "
    "overlapping: ranges made of several fields of several items compared with each other",
    r"array: a job with roles cannot be an array.*": "`array` beside `roles`: one field's "
    "presence depending on another's",
    r"'[^']*' has a step of 0: a step is at least 1": "an array range's step (`N-M:S`) of "
    "zeros: a pattern can say digits, not their value",
    r"'[^']*' ends before it begins": "an array range `N-M` with M below N: one number of the "
    "string compared with another",
    r"'.*': '[^']*' is not after '[^']*'; list ranges in ascending order, apart": "an array's "
    "ranges out of order or overlapping: the parts of one string compared with each other",
    r"indices are whole numbers from 0 to \d+, not \d+": "an index in the array grammar past "
    "its bound: a pattern can say digits, not the number they make",
}
"""Refusals by the gateway's request validation of bodies our schema allows, each because the
rule relates two fields, or parts of one string, which JSON Schema cannot express (the reason
with each)."""


def _names_each_field_at_fault(failure: Failure) -> bool:
    return bool(failure.invalid_params) and all(
        name and reason for name, reason in failure.invalid_params
    )


def _refused_for_a_stated_reason(failure: Failure) -> bool:
    return (
        failure.check == "RejectedPositiveData"
        and failure.status in (400, 422)
        and failure.media_type == PROBLEM_JSON
        and failure.detail not in (None, REQUEST_NOT_VALID)
        and _names_each_field_at_fault(failure)
    )


def _cross_field_rule(failure: Failure) -> bool:
    return (
        failure.check == "RejectedPositiveData"
        and failure.status == 422
        and _names_each_field_at_fault(failure)
        and all(
            any(re.fullmatch(rule, reason) for rule in CROSS_FIELD_RULES)
            for _, reason in failure.invalid_params
        )
    )


def _invalid_query_never_sent(f: Failure) -> bool:
    """The check made the query invalid with an undeclared parameter, yet the request sent
    names only declared ones (known on both sides)."""
    return (
        f.check == "AcceptedNegativeData"
        and "in query" in f.message
        and "additionalProperties" in f.message
        and f.query_sent is not None
        and f.query_declared is not None
        and set(f.query_sent) <= set(f.query_declared)
    )


EXCUSES: tuple[Excuse, ...] = (
    Excuse(
        "the token put back",
        "Schemathesis sends a request without the required `Authorization` header to see "
        "it refused, and the harness's `before_call` hook puts the bearer token back on "
        "every request, so the server rightly answers it as authorized",
        lambda f: f.check == "MissingHeaderNotRejected" and f.token_forced,
    ),
    Excuse(
        "refused for a stated reason",
        "the check takes every schema-valid request as one to accept, but the official "
        "text itself prescribes refusing some (the project in both or neither of "
        "`attributes.account` and `X-IRI-Facility-Project`; `bytes` and `lines` together; "
        "an `Idempotency-Key` reused with another body), and no schema can say what a "
        "resource can run (a program, a known queue, fitting nodes). Excused only as a "
        "400/422 problem naming each field at fault, never as the request validation's "
        "generic answer",
        _refused_for_a_stated_reason,
    ),
    Excuse(
        "a rule across fields",
        "the gateway's request validation refuses a body the schema allows only where "
        "the rule relates two fields, which JSON Schema cannot express; each such rule is "
        "in CROSS_FIELD_RULES with its reason, and every reason of the 422 must be one",
        _cross_field_rule,
    ),
    Excuse(
        "not modified is an answer",
        "the check counts only 2xx as accepting a request, but 304 Not Modified is the "
        "answer the official spec documents (getFacility, getSite, ...) for a "
        "`modified_since` the data has not changed since",
        lambda f: f.check == "RejectedPositiveData" and f.status == 304,
    ),
    Excuse(
        "too large is a refusal",
        "a body the check made invalid by growing strings or arrays past `maxLength` or "
        "`maxItems` can outgrow the server's request size limit first; the answer is then "
        "the documented 413 problem (RFC 9110: Content Too Large), a refusal the check does "
        "not count as one",
        lambda f: (
            f.check == "AcceptedNegativeData" and f.status == 413 and f.media_type == PROBLEM_JSON
        ),
    ),
    Excuse(
        "a spec refused at its index",
        "a bulk launch (launchJobs) answers 200 with one result per spec, and a spec the "
        "schema refuses is refused there, at its index (a 422 problem naming its fields "
        "`[i].field`), never the whole call, as its operation documents: the check counts "
        "only the call's status. Excused only when the answer's refused spec names each "
        "field below its index",
        lambda f: (
            f.check == "AcceptedNegativeData"
            and f.status == 200
            and bool(f.invalid_params)
            and all(re.match(r"\[\d+\]", name) for name, _ in f.invalid_params)
        ),
    ),
    Excuse(
        "the invalid query never sent",
        "Schemathesis makes a query invalid by adding a parameter the operation does not "
        "declare, but an empty value (an empty list, None) is dropped by the HTTP client on "
        "the way: the request sent names only declared parameters, is valid, and a 2xx is "
        "its right answer (an undeclared parameter that is sent is refused with a 422, "
        "tests/api/test_request_hygiene.py)",
        _invalid_query_never_sent,
    ),
)


def excuse_for(failure: Failure) -> Excuse | None:
    """The rule that excuses `failure`, or None: then it is the gateway's fault."""
    return next((excuse for excuse in EXCUSES if excuse.applies(failure)), None)


def media_type(headers: Any) -> str:
    """The media type of a response's headers (values as strings or lists of strings)."""
    value = next((v for k, v in dict(headers).items() if k.lower() == "content-type"), "")
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value).partition(";")[0].strip().lower()


def problem_parts(body: Any) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """`detail` and the `(name, reason)` pairs of `invalid_params` of a problem body (a JSON
    object), or of a bulk launch's first refused spec (a list of results: its `problem`,
    fields named `[i].field`); anything else has neither."""
    if isinstance(body, list):
        refused = [r["problem"] for r in body if isinstance(r, dict) and "problem" in r]
        return problem_parts(refused[0]) if refused else (None, ())
    if not isinstance(body, dict):
        return None, ()
    params = body.get("invalid_params")
    pairs = (
        tuple(
            (str(p.get("name") or ""), str(p.get("reason") or ""))
            for p in params
            if isinstance(p, dict)
        )
        if isinstance(params, list)
        else ()
    )
    detail = body.get("detail")
    return (detail if isinstance(detail, str) else None), pairs
