"""Runtime names as field types: checked against the runtime registry when a document is
validated, and listed from it when a JSON Schema is made.

The names are written once, in each runtime module (`iri_gateway/runtimes/`); the JobSpec and
the facility profile read them from the registry at the moment they need them, so a runtime
added to the registry is accepted and documented without a change here. An unknown name is
refused with the message and error type a `Literal` of the same names would give, so clients
see exactly what they saw when the names were written out.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from iri_gateway.models.choices import not_one_of
from iri_gateway.runtimes import RUNTIMES


class _RegisteredRuntime:
    """Pydantic hooks for a runtime name: any registered runtime, or only container runtimes
    (as the key of a profile's runtime block, where an unknown name is an unknown key)."""

    def __init__(self, *, containers_only: bool, as_key: bool = False) -> None:
        self.containers_only = containers_only
        self.as_key = as_key

    def names(self) -> tuple[str, ...]:
        return RUNTIMES.container_names() if self.containers_only else RUNTIMES.names()

    def check(self, value: Any) -> str:
        names = self.names()
        if type(value) is str and value in names:
            return value
        if self.as_key:
            raise PydanticCustomError("extra_forbidden", "Extra inputs are not permitted")
        raise not_one_of(names)

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(self.check)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"enum": list(self.names()), "type": "string"}


RuntimeName = Annotated[str, _RegisteredRuntime(containers_only=False)]
"""A registered runtime, bare execution (`none`) included: what a JobSpec may ask for."""

RuntimeBlockName = Annotated[str, _RegisteredRuntime(containers_only=True, as_key=True)]
"""The key of a profile's runtime block: a registered container runtime."""
