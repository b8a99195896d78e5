"""No container: the executable runs directly on the node, environment exported first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from iri_gateway.models.profile import ImageForm
from iri_gateway.planning.images import ImageRef
from iri_gateway.runtimes.base import Invocation, command_of
from iri_gateway.shell import SiteWord

if TYPE_CHECKING:
    from iri_gateway.models.plan import Decision

name = "none"
image_forms: frozenset[ImageForm] = frozenset()
supports_network_none = False
supports_cdi = False


def image_reference(ref: ImageRef) -> str | None:
    return None


def invocation(decision: Decision) -> Invocation:
    return Invocation(
        executable=SiteWord(""),
        options=[],
        image=None,
        command=command_of(decision),
        container_env=dict(decision.environment),
    )
