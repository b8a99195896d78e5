"""Size limits of a JobSpec, and text that must be valid Unicode.

Every JobSpec travels into a batch script, an argv and a database row, so nothing in it may
be unbounded: a 10 MB argument is refused here, with its field named, instead of being
planned, stored and refused by the scheduler. The limits are far above what a real job
needs and below what the operating system takes: Linux refuses a single argument or
`NAME=value` over 128 KiB (`MAX_ARG_STRLEN`), and a path over 4096 bytes (`PATH_MAX`). They
appear in the JSON Schema (`maxItems`, `maxLength`, `maxProperties`, `propertyNames`) and in
each resource's capabilities (`JobSpecLimits`). Free-form parts (`attributes` objects and
the extra fields the official objects allow) are bounded by the request size only.

JSON can carry a lone UTF-16 surrogate (`"\\ud800"`), which is no character at all: it cannot
be written to a script, a database or a response. Every string of a JobSpec, keys included,
is refused with its field named when it holds one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field

MAX_TEXT_LENGTH = 4096
"""Characters of a path, image, name, identifier, option or custom attribute value."""
MAX_SCRIPT_LENGTH = 65536
"""Characters of `pre_launch` and `post_launch` (shell text)."""
MAX_ARGUMENTS = 4096
"""Arguments of the executable (of the job, of a role)."""
MAX_ARGUMENT_LENGTH = 32768
"""Characters of one argument (at most 4 bytes each: within Linux's 128 KiB per argument)."""
MAX_ENVIRONMENT = 1024
"""Environment variables (of the job, of a role)."""
MAX_NAME_LENGTH = 256
"""Characters of an environment variable's name, a custom attribute's, a fact's or a runtime's
in `extra_options`."""
MAX_ENV_VALUE_LENGTH = 32768
"""Characters of an environment variable's value."""
MAX_ITEMS = 256
"""Entries of every other list or mapping: volume mounts, devices, extra options, flavours,
requirements, roles, custom attributes."""


class JobSpecLimits(BaseModel):
    """The size limits every JobSpec must respect (the same on every resource)."""

    max_text_length: int = Field(
        default=MAX_TEXT_LENGTH,
        description=(
            "Characters of a path, image, name, identifier, option or custom attribute value"
        ),
    )
    max_script_length: int = Field(
        default=MAX_SCRIPT_LENGTH, description="Characters of pre_launch and post_launch"
    )
    max_arguments: int = Field(default=MAX_ARGUMENTS, description="Arguments of a job or role")
    max_argument_length: int = Field(
        default=MAX_ARGUMENT_LENGTH, description="Characters of one argument"
    )
    max_environment: int = Field(
        default=MAX_ENVIRONMENT, description="Environment variables of a job or role"
    )
    max_name_length: int = Field(
        default=MAX_NAME_LENGTH,
        description=("Characters of an environment variable's, custom attribute's or fact's name"),
    )
    max_env_value_length: int = Field(
        default=MAX_ENV_VALUE_LENGTH, description="Characters of an environment value"
    )
    max_items: int = Field(
        default=MAX_ITEMS,
        description=(
            "Entries of any other list or mapping (mounts, devices, options, flavours, roles, "
            "custom attributes)"
        ),
    )


_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_reason(text: str) -> str | None:
    """Why `text` is not valid Unicode (its first lone surrogate), or None when it is."""
    if text.isascii():
        return None
    found = _SURROGATE.search(text)
    if found is None:
        return None
    return (
        f"not valid Unicode text: lone surrogate U+{ord(found.group()):04X} at "
        f"character {found.start() + 1}"
    )


def unicode_text(value: Any) -> Any:
    """A string without lone surrogates passes unchanged; anything else is the type's to judge."""
    if isinstance(value, str) and (reason := surrogate_reason(value)) is not None:
        raise ValueError(reason)
    return value


def shown(text: str, limit: int = 40) -> str:
    """`text` as a person reads it in an error: quoted, escaped, shortened when long."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    return ascii(cut)


def checked_keys(max_items: int, max_length: int, what: str) -> Callable[[Any], Any]:
    """A before-validator of a mapping: at most `max_items` entries, keys valid Unicode and at
    most `max_length` long.

    Keys are checked here, on the whole mapping, so an error names the mapping and shows the
    key escaped: a key that is not valid Unicode cannot be part of a field's path.
    """

    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        if len(value) > max_items:
            raise ValueError(f"{len(value)} entries; at most {max_items}")
        for key in value:
            if not isinstance(key, str):
                continue
            if (reason := surrogate_reason(key)) is not None:
                raise ValueError(f"{what} {shown(key)}: {reason}")
            if len(key) > max_length:
                raise ValueError(
                    f"{what} {shown(key)} has {len(key)} characters; at most {max_length}"
                )
        return value

    return check


def first_surrogate(value: Any, path: str = "") -> tuple[str, str] | None:
    """(JSON path, reason) of the first string, key or value, in free-form JSON data that is
    not valid Unicode; None when there is none."""
    for where, text in _texts(value, path):
        if (reason := surrogate_reason(text)) is not None:
            return where, reason
    return None


def _texts(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path or "(value)", value
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                if surrogate_reason(key) is not None:
                    yield f"{path or '(object)'} key {shown(key)}", key
                    continue
                yield from _texts(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _texts(item, f"{path}[{index}]")


Text = Annotated[str, Field(max_length=MAX_TEXT_LENGTH), BeforeValidator(unicode_text)]
"""A string of at most MAX_TEXT_LENGTH characters, valid Unicode."""
NonEmptyText = Annotated[
    str, Field(min_length=1, max_length=MAX_TEXT_LENGTH), BeforeValidator(unicode_text)
]
"""A non-empty string of at most MAX_TEXT_LENGTH characters, valid Unicode."""
ShellText = Annotated[
    str, Field(min_length=1, max_length=MAX_SCRIPT_LENGTH), BeforeValidator(unicode_text)
]
"""Shell commands (`pre_launch`, `post_launch`): at most MAX_SCRIPT_LENGTH characters."""
Argument = Annotated[str, Field(max_length=MAX_ARGUMENT_LENGTH), BeforeValidator(unicode_text)]
"""One argument of the executable."""
Arguments = Annotated[list[Argument], Field(max_length=MAX_ARGUMENTS)]
"""The executable's arguments."""
EnvValue = Annotated[str, Field(max_length=MAX_ENV_VALUE_LENGTH), BeforeValidator(unicode_text)]
"""One environment variable's value."""
Environment = Annotated[
    dict[str, EnvValue],
    Field(
        max_length=MAX_ENVIRONMENT,
        json_schema_extra={"propertyNames": {"maxLength": MAX_NAME_LENGTH}},
    ),
    BeforeValidator(checked_keys(MAX_ENVIRONMENT, MAX_NAME_LENGTH, "variable name")),
]
"""Environment variables: name -> value."""
TextList = Annotated[list[Text], Field(max_length=MAX_ITEMS)]
"""A list of at most MAX_ITEMS strings (e.g. extra options of one runtime)."""
NonEmptyTextList = Annotated[list[NonEmptyText], Field(max_length=MAX_ITEMS)]
"""A list of at most MAX_ITEMS non-empty strings (e.g. CDI device names)."""
ExtraOptions = Annotated[
    dict[str, TextList],
    Field(
        max_length=MAX_ITEMS, json_schema_extra={"propertyNames": {"maxLength": MAX_NAME_LENGTH}}
    ),
    BeforeValidator(checked_keys(MAX_ITEMS, MAX_NAME_LENGTH, "runtime name")),
]
"""{runtime name: [option, ...]}."""
CustomAttributes = Annotated[
    dict[str, Text],
    Field(
        max_length=MAX_ITEMS, json_schema_extra={"propertyNames": {"maxLength": MAX_NAME_LENGTH}}
    ),
    BeforeValidator(checked_keys(MAX_ITEMS, MAX_NAME_LENGTH, "attribute name")),
]
"""Custom scheduler attributes: name -> value."""
