"""The names of job templates (extension), shared by the JobSpec's `template` field and the
templates themselves (`templates.py`), which imports the JobSpec."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from iri_gateway.models.limits import unicode_text

TEMPLATE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
"""Template names: letters, digits, '.', '_', '-'; start with a letter or digit; 64 at most.
They appear in URLs (`/compute/templates/{name}`), so nothing else."""


def _template_name(name: str) -> str:
    if not re.fullmatch(TEMPLATE_NAME, name):
        raise ValueError(
            f"{name!r}: template names are 1 to 64 letters, digits, '.', '_' or '-', starting "
            "with a letter or digit"
        )
    return name


TemplateName = Annotated[
    str,
    BeforeValidator(unicode_text),
    AfterValidator(_template_name),
    Field(json_schema_extra={"pattern": TEMPLATE_NAME}),
]
"""A template's name (see TEMPLATE_NAME)."""
