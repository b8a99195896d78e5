"""No container: the executable runs directly on the node, environment exported first.

Bare execution is always offered and never configured in a profile (`container = False`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iri_gateway.models.images import ImageRef
from iri_gateway.runtimes.base import Invocation, Runtime, command_of
from iri_gateway.shell import SiteWord

if TYPE_CHECKING:
    from iri_gateway.models.plan import Decision


class Bare(Runtime):
    name = "none"
    program = ""
    image_forms = frozenset()
    rank = 1000  # always listed last
    container = False

    def image_reference(self, ref: ImageRef) -> str | None:
        return None

    def invocation(self, decision: Decision) -> Invocation:
        return Invocation(
            executable=SiteWord(""),
            options=[],
            image=None,
            command=command_of(decision),
            container_env=dict(decision.environment),
        )


RUNTIME = Bare()
