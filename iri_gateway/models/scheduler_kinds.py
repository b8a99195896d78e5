"""The scheduler kind of a profile as a field type: checked against the plug-ins it is
validated with, documented as the kinds the gateway ships.

`SchedulerKind` lists the shipped kinds for the profile's JSON Schema (`schema.json`), and
`iri_gateway.schedulers` refuses to start when its plug-ins and this list differ, so the
schema never offers a kind without a plug-in. A value is accepted when a plug-in of the
validation context (`models.scheduler_facts`) has that kind, so a plug-in is consulted for
every fact of its kind; an unknown kind is refused with the error a `Literal` gives.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from iri_gateway.models.choices import not_one_of
from iri_gateway.models.scheduler_facts import schedulers_of

SchedulerKind = Literal["slurm", "pbs", "local"]


class _RegisteredKind:
    """Pydantic hooks for a scheduler kind (see the module's docstring)."""

    def check(self, value: Any, info: core_schema.ValidationInfo) -> str:
        registered = schedulers_of(info.context)
        if type(value) is str and value in registered:
            return value
        shipped = get_args(SchedulerKind)
        names = (*shipped, *(k for k in registered if k not in shipped))
        raise not_one_of(names)

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.with_info_plain_validator_function(self.check)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"enum": list(get_args(SchedulerKind)), "type": "string"}


RegisteredKind = Annotated[str, _RegisteredKind()]
"""A profile's `scheduler.kind`: the kind of one of the scheduler plug-ins."""
