"""How a name outside a set read from a registry is refused: in the words of pydantic's
`Literal`, so that clients see what they saw when the names were written out."""

from __future__ import annotations

from pydantic_core import PydanticCustomError


def listed(names: tuple[str, ...]) -> str:
    """`'a', 'b' or 'c'`: how pydantic lists the values of a Literal in its error."""
    quoted = [repr(name) for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def not_one_of(names: tuple[str, ...]) -> PydanticCustomError:
    """The error a `Literal[names]` field gives for any other value."""
    return PydanticCustomError(
        "literal_error", "Input should be {expected}", {"expected": listed(names)}
    )
