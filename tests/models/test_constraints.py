"""The constraint language of flavour requirements (`iri_gateway.models.constraints`).

Properties check the comparisons against Python's own (exact ints, `packaging` versions,
casefolded names); explicit cases pin down lists, existence, booleans, malformed input and the
wording of the reasons a constraint gives when it does not hold.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from packaging.version import Version

from iri_gateway.models.constraints import (
    STANDARD_FACTS,
    Constraint,
    ConstraintError,
    FactKind,
    first_failure,
    parse_constraint,
    parse_requirements,
    requirements_mapping,
)

OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
    "!=": operator.ne,
}

BIG = 2**53
# Neighbours of 2**53 are where rounding through float would go wrong.
big_ints = st.integers() | st.sampled_from(
    [BIG - 1, BIG, BIG + 1, BIG + 2, -BIG - 1, 10**30, 10**30 + 1, 2**200, 2**200 + 1]
)


def holds(fact: str, raw: Any, facts: dict[str, Any]) -> bool:
    return parse_constraint(fact, raw).check(facts, "r") is None


# 1. numbers -------------------------------------------------------------------------------


@given(a=big_ints, n=big_ints, op=st.sampled_from(sorted(OPERATORS)))
@example(a=BIG + 1, n=BIG, op=">")
@example(a=BIG, n=BIG + 1, op="<")
@example(a=BIG + 1, n=BIG, op="!=")
@example(a=10**30 + 1, n=10**30, op="==")
def test_integer_comparisons_are_exact(a: int, n: int, op: str) -> None:
    assert holds("gpu_count", f"{op} {n}", {"gpu_count": a}) == OPERATORS[op](a, n)


@given(a=big_ints, n=big_ints)
@example(a=BIG + 1, n=BIG)
@example(a=BIG, n=BIG)
def test_bare_integer_is_exact_equality(a: int, n: int) -> None:
    assert holds("gpu_count", n, {"gpu_count": a}) == (a == n)
    assert holds("gpu_count", str(n), {"gpu_count": a}) == (a == n)


@given(a=big_ints, items=st.lists(big_ints, min_size=1, max_size=4))
def test_integer_membership_is_exact(a: int, items: list[int]) -> None:
    listed = "[" + ", ".join(str(i) for i in items) + "]"
    assert holds("gpu_count", f"in {listed}", {"gpu_count": a}) == (a in items)
    assert holds("gpu_count", f"not in {listed}", {"gpu_count": a}) == (a not in items)


def test_numbers_compare_as_numbers_not_text() -> None:
    assert holds("gpu_count", ">= 10", {"gpu_count": 9}) is False
    assert holds("gpu_count", ">= 9", {"gpu_count": 10}) is True
    assert holds("gpu_memory_gib", "> 39.5", {"gpu_memory_gib": 40}) is True
    assert holds("gpu_memory_gib", 80.0, {"gpu_memory_gib": 80}) is True
    assert holds("memory_gib", "< 512", {"memory_gib": 512}) is False


# 2. versions -------------------------------------------------------------------------------

versions = st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=4).map(
    lambda parts: ".".join(str(p) for p in parts)
)


@given(a=versions, b=versions, op=st.sampled_from(sorted(OPERATORS)))
@example(a="12.4", b="11", op=">")
@example(a="12.10", b="12.9", op=">")
@example(a="12.0", b="12", op="==")
@example(a="12.0", b="12", op="!=")
def test_version_ordering_agrees_with_packaging(a: str, b: str, op: str) -> None:
    expected = OPERATORS[op](Version(a), Version(b))
    assert holds("nvidia_cuda", f"{op} {b}", {"nvidia_cuda": a}) == expected
    assert holds("rocm", f"{op} {b}", {"rocm": a}) == expected


@pytest.mark.parametrize(
    ("fact", "value", "raw", "expected"),
    [
        ("nvidia_cuda", "12.4", "> 11", True),
        ("nvidia_cuda", "11.8", "< 12", True),
        ("nvidia_cuda", "11.8", "> 12", False),
        ("nvidia_cuda", "12.0", "== 12", True),
        ("nvidia_cuda", "12.0", "12", True),
        ("nvidia_cuda", "12.10", "> 12.9", True),  # not a decimal: 12.10 is after 12.9
        ("rocm", "6.0.2", ">= 6", True),
        ("foo", "2.10", "> 2.9", True),  # unknown label under ordering compares as versions
        ("foo", "2.10", "< 2.9", False),
    ],
)
def test_version_examples(fact: str, value: str, raw: str, expected: bool) -> None:
    assert holds(fact, raw, {fact: value}) is expected


# 3. names ----------------------------------------------------------------------------------

names = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    min_size=1,
    max_size=8,
)


def test_names_are_case_insensitive() -> None:
    assert holds("gpu_vendor", "NVIDIA", {"gpu_vendor": "nvidia"})
    assert holds("gpu_vendor", "== nvidia", {"gpu_vendor": "NVIDIA"})
    assert not holds("gpu_vendor", "!= Nvidia", {"gpu_vendor": "nVidia"})
    assert not holds("gpu_vendor", "== amd", {"gpu_vendor": "nvidia"})
    assert holds("gpu_model", "in [A100, H100]", {"gpu_model": "h100"})


@given(value=names, written=names)
def test_name_equality_is_casefolded(value: str, written: str) -> None:
    same = value.casefold() == written.casefold()
    assert holds("gpu_vendor", f"== {written}", {"gpu_vendor": value}) == same
    assert holds("gpu_vendor", f"!= {written}", {"gpu_vendor": value}) == (not same)
    assert holds("gpu_vendor", f"== {written.upper()}", {"gpu_vendor": value.lower()}) == same


@given(value=names, items=st.lists(names, min_size=1, max_size=5))
def test_name_membership_agrees_with_python(value: str, items: list[str]) -> None:
    member = value.casefold() in {item.casefold() for item in items}
    listed = "[" + ", ".join(items) + "]"
    assert holds("gpu_model", f"in {listed}", {"gpu_model": value}) == member
    assert holds("gpu_model", f"not in {listed}", {"gpu_model": value}) == (not member)


# 4. list-valued facts ----------------------------------------------------------------------

RUNTIMES = {"runtime": ["podman", "none"]}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("== podman", True),
        ("podman", True),
        ("== PODMAN", True),
        ("!= podman", False),
        ("!= apptainer", True),
        ("in [apptainer, podman]", True),
        ("in [apptainer, shifter]", False),
        ("not in [apptainer]", True),
        ("not in [apptainer, none]", False),
        ("== apptainer", False),
    ],
)
def test_list_valued_fact(raw: str, expected: bool) -> None:
    assert holds("runtime", raw, RUNTIMES) is expected


def test_ordering_on_a_list_gives_a_reason() -> None:
    reason = parse_constraint("foo", "> 1").check({"foo": [1, 2]}, "r")
    assert reason is not None
    assert "list" in reason


# 5. existence and missing facts ------------------------------------------------------------


def test_exists_and_not_exists() -> None:
    present = {"gpu_count": 0, "foo": "bar"}
    assert parse_constraint("gpu_count", "exists").check(present, "r") is None
    assert parse_constraint("foo", "exists").check(present, "r") is None
    assert parse_constraint("bar", "!exists").check(present, "r") is None
    assert parse_constraint("gpu_model", "!exists").check(present, "r") is None

    reason = parse_constraint("foo", "!exists").check(present, "site-a")
    assert reason is not None
    assert "site-a" in reason
    assert "'bar'" in reason

    reason = parse_constraint("bar", "exists").check(present, "site-a")
    assert reason is not None
    assert "unknown fact" in reason


@pytest.mark.parametrize(
    "raw", ["exists", ">= 1", "< 1", "== x", "!= x", "x", "in [x]", "not in [x]", 1, True]
)
def test_missing_fact_never_satisfies(raw: Any) -> None:
    unknown = parse_constraint("custom_label", raw).check({}, "site-a")
    assert unknown is not None
    assert "unknown fact" in unknown
    assert "custom_label" in unknown
    assert "site-a" in unknown

    fact = "cpu_mhz" if isinstance(raw, str) and raw[0] in "<>" else "mpi"
    missing = parse_constraint(fact, raw).check({"other": 1}, "site-a")
    assert missing is not None
    assert f"has no {fact}" in missing
    assert "site-a" in missing
    assert "unknown fact" not in missing


@given(raw=st.sampled_from(["exists", "> 0", "!= 3", "in [1, 2]", "not in [5]", "== 0"]))
def test_missing_number_fact_never_satisfies(raw: str) -> None:
    assert parse_constraint("gpu_count", raw).check({}, "r") is not None


# 6. malformed constraints -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fact", "raw", "phrase"),
    [
        ("gpu_count", ">=", "no value"),
        ("foo", ">=", "no value"),
        ("gpu_model", "in a,b", "take a list"),
        ("gpu_model", "in []", "empty"),
        ("gpu_model", "not in [a, ]", "empty"),
        ("gpu_count", "=> 2", "not a constraint"),
        ("gpu_count", ">= two", "is a number"),
        ("gpu_count", "in [1, two]", "is a number"),
        ("gpu_vendor", "> amd", "has no order"),
        ("runtime", "< podman", "has no order"),
        ("nvidia_cuda", "> abc", "is a version"),
        ("foo", "> bar", "needs a number or a version"),
        ("gpu_count", "", "empty"),
        ("", "1", "fact name"),
        (" gpu_count", "1", "fact name"),
    ],
)
def test_malformed_constraints_are_refused(fact: str, raw: str, phrase: str) -> None:
    with pytest.raises(ConstraintError) as info:
        parse_constraint(fact, raw)
    assert phrase in str(info.value)
    assert isinstance(info.value, ValueError)


def test_parse_requirements_names_the_fact() -> None:
    with pytest.raises(ConstraintError, match=r"requirement gpu_vendor: .*has no order"):
        parse_requirements({"gpu_count": ">= 1", "gpu_vendor": "> amd"})
    parsed = parse_requirements({"gpu_count": ">= 1", "gpu_vendor": "nvidia", "ssd": True})
    assert [(c.fact, c.op) for c in parsed] == [
        ("gpu_count", ">="),
        ("gpu_vendor", "=="),
        ("ssd", "=="),
    ]


def test_non_scalar_hashable_requirement_is_refused() -> None:
    with pytest.raises(ConstraintError, match="string, number or true/false"):
        parse_constraint("gpu_count", None)  # type: ignore[arg-type]


FACTS = [*STANDARD_FACTS, "foo", "ssd"]


@given(fact=st.sampled_from(FACTS), raw=st.text())
@example(fact="gpu_count", raw="in [")
@example(fact="foo", raw="not in")
@example(fact="foo", raw="> '")
@example(fact="foo", raw='== ""')
@example(fact="gpu_count", raw=">= 1e999")
@example(fact="nvidia_cuda", raw="in [1.0, 2.x]")
def test_parsing_text_never_raises_anything_else(fact: str, raw: str) -> None:
    try:
        constraint = parse_constraint(fact, raw)
    except ConstraintError as error:
        assert str(error)
        return
    assert isinstance(constraint, Constraint)
    assert constraint.fact == fact
    # Whatever parsed can be checked against any plausible fact value without raising.
    for value in (0, 2**60, 1.5, "12.4", "nvidia", True, ["podman", "none"]):
        reason = constraint.check({fact: value}, "r")
        assert reason is None or "r has" in reason
    # A missing fact satisfies only !exists.
    assert (constraint.check({}, "r") is None) == (constraint.op == "!exists")


@given(fact=st.text(), raw=st.text())
def test_arbitrary_fact_names_and_text(fact: str, raw: str) -> None:
    try:
        constraint = parse_constraint(fact, raw)
    except ConstraintError:
        return
    assert constraint.fact == fact


# 7. requirements_mapping -------------------------------------------------------------------


def test_requirements_mapping_accepts_both_shapes() -> None:
    listed = [{"gpu_count": ">= 2"}, {"nvidia_cuda": "> 11"}, {"ssd": True}]
    assert requirements_mapping(listed) == {"gpu_count": ">= 2", "nvidia_cuda": "> 11", "ssd": True}
    mapping = {"gpu_count": ">= 2"}
    assert requirements_mapping(mapping) is mapping
    assert requirements_mapping([]) == {}
    assert requirements_mapping("gpu_count") == "gpu_count"  # left for the model to refuse


def test_requirements_mapping_refuses_duplicates_and_multi_key_entries() -> None:
    with pytest.raises(ValueError, match=r"requirements\[2\].*'gpu_count'.*twice"):
        requirements_mapping([{"gpu_count": ">= 1"}, {"mpi": "cray"}, {"gpu_count": "< 4"}])
    with pytest.raises(ValueError, match=r"requirements\[1\] must be a mapping of one fact"):
        requirements_mapping([{"gpu_count": ">= 1"}, {"mpi": "cray", "rocm": "> 5"}])
    with pytest.raises(ValueError, match=r"requirements\[0\]"):
        requirements_mapping([{}])
    with pytest.raises(ValueError, match=r"requirements\[0\]"):
        requirements_mapping(["gpu_count"])


# 8. booleans -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (True, True),
        ("true", True),
        ("yes", True),
        ("True", True),
        ("== true", True),
        (False, False),
        ("false", False),
        ("no", False),
        ("!= true", False),
        ("!= false", True),
    ],
)
def test_boolean_label(raw: Any, expected: bool) -> None:
    assert holds("ssd", raw, {"ssd": True}) is expected


def test_false_label() -> None:
    assert holds("ssd", False, {"ssd": False})
    assert holds("ssd", "no", {"ssd": False})
    assert not holds("ssd", True, {"ssd": False})


@pytest.mark.parametrize("raw", ["> 0", ">= 1", "< 2", "<= 1"])
def test_ordering_on_a_boolean_label_never_holds(raw: str) -> None:
    for value in (True, False):
        reason = parse_constraint("ssd", raw).check({"ssd": value}, "site-a")
        assert reason is not None
        assert "site-a" in reason
        assert "yes/no" in reason


def test_true_and_one_are_not_confused() -> None:
    # True == 1 in Python (and as a cache key); the constraints must stay apart.
    as_bool = parse_constraint("gpu_count", True)
    as_int = parse_constraint("gpu_count", 1)
    assert as_bool.operands == ("true",)
    assert as_int.operands == ("1",)
    assert as_int.check({"gpu_count": 1}, "r") is None
    assert holds("ssd", 1, {"ssd": True}) is False


# 9. reasons ---------------------------------------------------------------------------------


def test_reason_names_where_and_value() -> None:
    assert (
        parse_constraint("gpu_count", ">= 2").check({"gpu_count": 0}, "perlmutter-cpu")
        == "gpu_count >= 2: perlmutter-cpu has gpu_count 0"
    )
    assert (
        parse_constraint("gpu_vendor", "nvidia").check({"gpu_vendor": "amd"}, "frontier")
        == "gpu_vendor == nvidia: frontier has gpu_vendor 'amd'"
    )
    assert (
        parse_constraint("runtime", "in [apptainer]").check(RUNTIMES, "local")
        == "runtime in [apptainer]: local has runtime [podman, none]"
    )
    assert (
        parse_constraint("nvidia_cuda", "> 12").check({}, "perlmutter-cpu")
        == "nvidia_cuda > 12: perlmutter-cpu has no nvidia_cuda"
    )


@given(a=st.integers(), n=st.integers(), where=names)
def test_every_failure_names_where_and_value(a: int, n: int, where: str) -> None:
    reason = parse_constraint("gpu_count", f"> {n}").check({"gpu_count": a}, where)
    if a > n:
        assert reason is None
    else:
        assert reason == f"gpu_count > {n}: {where} has gpu_count {a}"


def test_first_failure() -> None:
    constraints = parse_requirements(
        {"gpu_count": ">= 1", "gpu_vendor": "nvidia", "nvidia_cuda": "> 12"}
    )
    facts = {"gpu_count": 4, "gpu_vendor": "AMD", "nvidia_cuda": "11.8"}
    reason = first_failure(constraints, facts, "site-a")
    assert reason == "gpu_vendor == nvidia: site-a has gpu_vendor 'AMD'"
    good = {"gpu_count": 4, "gpu_vendor": "NVIDIA", "nvidia_cuda": "12.4"}
    assert first_failure(constraints, good, "site-a") is None
    assert first_failure([], {}, "site-a") is None


def test_standard_fact_kinds() -> None:
    assert STANDARD_FACTS["gpu_count"] is FactKind.NUMBER
    assert STANDARD_FACTS["nvidia_cuda"] is FactKind.VERSION
    assert STANDARD_FACTS["rocm"] is FactKind.VERSION
    assert STANDARD_FACTS["gpu_vendor"] is FactKind.NAME
    assert STANDARD_FACTS["runtime"] is FactKind.NAMES
