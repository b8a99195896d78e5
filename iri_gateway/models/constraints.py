"""The constraint language of flavour `requirements` (docs/design.md Contract 1): parsed, checked.

A requirement names a hardware fact and a constraint on it: `">= 2"`, `"> 11"`, `"< 4"`,
`"== nvidia"`, `"!= amd"`, `"in [a100, h100]"`, `"not in [mi250x]"`, `"exists"`,
`"!exists"`, or a bare value meaning equality. Numbers compare as numbers (exactly: integers
are never rounded through floats), versions as versions (PEP 440 ordering from `packaging`, so
`12.4 > 11` and `11.8 < 12`), names case-insensitively, architectures by machine
(`cpu_arch == arm64` holds on `aarch64`; see `models.platforms`). A fact the resource does not
have never satisfies a constraint (only `!exists` holds), and the reason says so.

Constraints are parsed once, when the JobSpec is validated, so a malformed one is refused
with the flavour and fact named before any resource is considered; facts whose kind is known
(numbers, versions, names) also have their operands checked then.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from iri_gateway.models.platforms import PlatformError, normalise_arch

Operator = Literal[">=", ">", "<=", "<", "==", "!=", "in", "not in", "exists", "!exists"]
ORDERING: frozenset[str] = frozenset({">=", ">", "<=", "<"})
RequirementValue = str | int | float | bool


class FactKind(Enum):
    """How a standard fact's values compare."""

    NUMBER = "number"
    VERSION = "version"
    NAME = "name"
    NAMES = "names"  # a list of names: holds when any (==, in) or none (!=, not in) matches


STANDARD_FACTS: dict[str, FactKind] = {
    "gpu_count": FactKind.NUMBER,
    "gpu_vendor": FactKind.NAME,
    "gpu_model": FactKind.NAME,
    "gpu_memory_gib": FactKind.NUMBER,
    "nvidia_cuda": FactKind.VERSION,
    "rocm": FactKind.VERSION,
    "cpu_arch": FactKind.NAME,
    "cpu_mhz": FactKind.NUMBER,
    "cpu_cores": FactKind.NUMBER,
    "memory_gib": FactKind.NUMBER,
    "node_count": FactKind.NUMBER,
    "runtime": FactKind.NAMES,
    "mpi": FactKind.NAME,
    "cdi_devices": FactKind.NAMES,
}
"""The facts every resource's profile yields (computed by `models.facts.hardware_facts`);
`cdi_devices` only where they were detected (`iri_gateway.machine_facts`)."""
ARCH_FACT = "cpu_arch"
"""The architecture fact: its values and operands compare by machine (`arm64` == `aarch64`)."""

_COMPARISON = re.compile(r"(>=|<=|==|!=|>|<)\s*(.*)", re.DOTALL)
_MEMBERSHIP = re.compile(r"(not\s+in|in)(?=[\s\[]|$)\s*(.*)", re.DOTALL)
_INTEGER = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_QUOTES = ("'", '"')


class ConstraintError(ValueError):
    """A requirement that cannot be understood; the message names the fact and says why."""


@dataclass(frozen=True)
class Constraint:
    """One parsed requirement: `fact op operands`."""

    fact: str
    op: Operator
    operands: tuple[str, ...]
    written: str

    def __str__(self) -> str:
        if self.op == "==" and not self.written.startswith("=="):
            return f"{self.fact} == {self.written}"
        return f"{self.fact} {self.written}"

    def check(self, facts: Mapping[str, Any], where: str = "this resource") -> str | None:
        """None when the constraint holds on `facts`, else why not (naming `where`)."""
        if self.fact not in facts:
            if self.op == "!exists":
                return None
            if self.fact in STANDARD_FACTS:
                return f"{self}: {where} has no {self.fact}"
            return f"{self}: unknown fact {self.fact!r} on {where} (never matches)"
        value = facts[self.fact]
        if self.op == "exists":
            return None
        if self.op == "!exists":
            return f"{self}: {where} has {self.fact} {_show(value)}"
        try:
            holds = self._holds(value)
        except _Incomparable as error:
            return f"{self}: {where} has {self.fact} {_show(value)}, {error}"
        return None if holds else f"{self}: {where} has {self.fact} {_show(value)}"

    def _holds(self, value: Any) -> bool:
        if isinstance(value, list | tuple):
            if self.op in ORDERING:
                raise _Incomparable("a list, which has no order")
            matches = any(self._equal_any(item) for item in value)
            return matches if self.op in ("==", "in") else not matches
        if self.op in ORDERING:
            return _ordered(self.op, *_comparable(self.fact, value, self.operands[0], True))
        equal = self._equal_any(value)
        return equal if self.op in ("==", "in") else not equal

    def _equal_any(self, value: Any) -> bool:
        for operand in self.operands:
            try:
                left, right = _comparable(self.fact, value, operand, False)
            except _Incomparable:
                continue
            if left == right:
                return True
        return False


class _Incomparable(Exception):
    """A fact's value and an operand of different kinds (e.g. a name and a number)."""


def _show(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(str(item) for item in value) + "]"
    return repr(value) if isinstance(value, str) else str(value).lower()


def _number(text: str) -> int | float | None:
    """An exact int for integer literals, a float for decimals; None for anything else."""
    try:
        if _INTEGER.fullmatch(text):
            return int(text)
        if _DECIMAL.fullmatch(text):
            return float(text)
    except ValueError:  # beyond Python's int/str conversion limit: not a number we take
        return None
    return None


@lru_cache(maxsize=4096)
def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except (InvalidVersion, ValueError):  # ValueError: a release number past the int limit
        return None


def _comparable(fact: str, value: Any, operand: str, ordering: bool) -> tuple[Any, Any]:
    """`value` and `operand` as two things of one kind that Python compares correctly."""
    kind = STANDARD_FACTS.get(fact)
    if isinstance(value, bool):
        flag = _BOOLEANS.get(operand.casefold())
        if flag is None or ordering:
            raise _Incomparable("a yes/no value")
        return value, flag
    if isinstance(value, int | float) and kind is not FactKind.VERSION:
        number = _number(operand)
        if number is None:
            raise _Incomparable(f"a number, not comparable with {operand!r}")
        return value, number
    text = str(value)
    if kind is FactKind.VERSION or (kind is None and ordering):
        left, right = _version(text), _version(operand)
        if left is None or right is None:
            raise _Incomparable(f"not comparable with {operand!r} as versions")
        return left, right
    if ordering:
        raise _Incomparable("a name, which has no order")
    if fact == ARCH_FACT:
        try:
            return normalise_arch(text), normalise_arch(operand)
        except PlatformError as error:
            raise _Incomparable(str(error)) from None
    return text.casefold(), operand.casefold()


_BOOLEANS = {"true": True, "yes": True, "false": False, "no": False}


def _ordered(op: str, left: Any, right: Any) -> bool:
    if op == ">=":
        return bool(left >= right)
    if op == ">":
        return bool(left > right)
    if op == "<=":
        return bool(left <= right)
    return bool(left < right)


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in _QUOTES:
        return text[1:-1]
    return text


def _check_operand(fact: str, op: str, operand: str) -> None:
    """Operands of known facts must be of the fact's kind; checked once, at parse time."""
    kind = STANDARD_FACTS.get(fact)
    if fact == ARCH_FACT and op not in ORDERING:
        try:
            normalise_arch(operand)
        except PlatformError as error:
            raise ConstraintError(str(error)) from None
    if kind is FactKind.NUMBER and _number(operand) is None:
        raise ConstraintError(f"{fact} is a number; {operand!r} is not")
    if kind is FactKind.VERSION and _version(operand) is None:
        raise ConstraintError(f"{fact} is a version; {operand!r} is not a version")
    if op in ORDERING:
        if kind in (FactKind.NAME, FactKind.NAMES):
            raise ConstraintError(
                f"{fact} is a name and has no order; use ==, !=, in [...], not in [...] or exists"
            )
        if kind is None and _version(operand) is None:
            raise ConstraintError(f"{op} needs a number or a version, not {operand!r}")


def parse_constraint(fact: str, raw: RequirementValue) -> Constraint:
    """Parse one requirement; ConstraintError (saying why, naming the fact) when malformed."""
    if not isinstance(raw, str | int | float | bool):
        raise ConstraintError(f"a constraint is a string, number or true/false, not {raw!r}")
    if isinstance(raw, int) and not isinstance(raw, bool) and raw.bit_length() > 1000:
        raise ConstraintError("the number is too large")
    return _parse_cached(fact, raw, type(raw).__name__)


@lru_cache(maxsize=4096)
def _parse_cached(fact: str, raw: RequirementValue, _kind: str) -> Constraint:
    # `_kind` keeps True and 1 (equal as dict keys) apart in the cache.
    if not fact or fact != fact.strip():
        raise ConstraintError(f"fact name {fact!r} is empty or has surrounding spaces")
    if isinstance(raw, bool):
        return Constraint(fact, "==", ("true" if raw else "false",), str(raw).lower())
    if isinstance(raw, int | float):
        operand = str(raw)
        _check_operand(fact, "==", operand)
        return Constraint(fact, "==", (operand,), operand)
    written = raw.strip()
    if not written:
        raise ConstraintError("the constraint is empty")
    if written in ("exists", "!exists"):
        return Constraint(fact, written, (), written)  # type: ignore[arg-type]
    comparison = _COMPARISON.fullmatch(written)
    if comparison:
        op, operand = comparison.group(1), _unquote(comparison.group(2))
        if not operand:
            raise ConstraintError(f"{written!r} has no value after {op!r}")
        _check_operand(fact, op, operand)
        return Constraint(fact, op, (operand,), written)  # type: ignore[arg-type]
    membership = _MEMBERSHIP.fullmatch(written)
    if membership:
        op = "not in" if membership.group(1) != "in" else "in"
        items = _parse_list(written, membership.group(2))
        for item in items:
            _check_operand(fact, op, item)
        return Constraint(fact, op, items, written)  # type: ignore[arg-type]
    if written[0] in "<>=!":
        raise ConstraintError(
            f"{written!r} is not a constraint; operators are >=, >, <=, <, ==, !=, in [...], "
            "not in [...], exists, !exists"
        )
    operand = _unquote(written)
    _check_operand(fact, "==", operand)
    return Constraint(fact, "==", (operand,), written)


def _parse_list(written: str, text: str) -> tuple[str, ...]:
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        raise ConstraintError(f"{written!r}: 'in' and 'not in' take a list, e.g. in [a, b]")
    items = tuple(_unquote(item) for item in text[1:-1].split(","))
    if any(not item for item in items):
        raise ConstraintError(f"{written!r}: the list is empty or has an empty item")
    return items


def requirements_mapping(raw: Any) -> Any:
    """Both accepted shapes, a mapping or a list of one-key mappings, as one mapping.

    Anything else is passed through unchanged for the model's own type errors.
    """
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        return raw
    merged: dict[Any, Any] = {}
    for index, entry in enumerate(raw):
        if not isinstance(entry, Mapping) or len(entry) != 1:
            raise ValueError(
                f"requirements[{index}] must be a mapping of one fact to its constraint, "
                f"e.g. {{gpu_count: '>= 2'}}; got {entry!r}"
            )
        ((fact, constraint),) = entry.items()
        if fact in merged:
            raise ValueError(f"requirements[{index}]: fact {fact!r} is given twice")
        merged[fact] = constraint
    return merged


def parse_requirements(requirements: Mapping[str, RequirementValue]) -> list[Constraint]:
    """Every requirement parsed, in order; the first malformed one raises ConstraintError."""
    constraints = []
    for fact, raw in requirements.items():
        try:
            constraints.append(parse_constraint(fact, raw))
        except ConstraintError as error:
            raise ConstraintError(f"requirement {fact}: {error}") from None
    return constraints


def first_failure(
    constraints: Sequence[Constraint], facts: Mapping[str, Any], where: str
) -> str | None:
    """The reason the first failing constraint gives, or None when all hold."""
    for constraint in constraints:
        reason = constraint.check(facts, where)
        if reason is not None:
            return reason
    return None
