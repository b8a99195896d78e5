"""Where can this job run? Every resource ranked, with the flavour each would use or why not.

Placement negotiates the job on every resource given (no script is rendered: the answer is
the decision, not the batch file) and ranks the results: resources that can run the job
first, best chosen flavour priority first, then in the order the resources were loaded;
then the others, fewest problems first. Pure: no I/O, shared by the API and the CLI.
"""

from __future__ import annotations

from collections.abc import Iterable

from iri_gateway.errors import InvalidJobSpecError, JobRejectedError
from iri_gateway.models.constraints import STANDARD_FACTS
from iri_gateway.models.jobspec import AppRef, JobSpec
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.placement import Placement, PlacementProblem
from iri_gateway.planning.negotiate import (
    FlavourChoice,
    negotiate,
    prepare_flavours,
    unknown_facts,
)


# Placements are built with `model_construct`: every value comes from validated models and
# plain strings, and placement over many resources is on the path users wait for.
def known_facts(resources: Iterable[LoadedResource]) -> frozenset[str]:
    """Every fact a flavour requirement may name: the standard ones and each resource's."""
    return frozenset(STANDARD_FACTS).union(*(loaded.facts for loaded in resources))


def place_on(
    spec: JobSpec,
    loaded: LoadedResource,
    flavours: FlavourChoice | None = None,
    known: frozenset[str] | None = None,
) -> Placement:
    """The answer of one resource (`flavours`: the job's prepared flavours, if any; `known`:
    the facts of every loaded resource)."""
    facility = loaded.profile.facility.id
    try:
        decision = negotiate(spec, loaded, flavours, known)
    except JobRejectedError as error:
        return Placement.model_construct(
            resource=loaded.id,
            facility=facility,
            runnable=False,
            app=_app(spec),
            flavour=None,
            priority=None,
            runtime=None,
            queue=None,
            image=None,
            flavours=[],
            role_flavours={},
            warnings=[],
            problems=[
                PlacementProblem.model_construct(name=p.field, reason=p.reason, offered=p.offered)
                for p in error.problems
            ],
        )
    chosen = next((f for f in decision.flavours if f.status == "chosen"), None)
    return Placement.model_construct(
        resource=loaded.id,
        facility=facility,
        runnable=True,
        app=_app(spec),
        flavour=decision.flavour,
        priority=chosen.priority if chosen else None,
        runtime=decision.runtime,
        queue=decision.queue.name if decision.queue else None,
        image=decision.image,
        flavours=list(decision.flavours),
        warnings=list(decision.warnings),
        problems=[],
        role_flavours={role.name: role.decision.flavour for role in decision.cluster.roles}
        if decision.cluster is not None
        else {},
    )


def _app(spec: JobSpec) -> AppRef | None:
    return spec.container.app if spec.container is not None else None


def _rank(entry: tuple[int, Placement]) -> tuple[bool, float, int, int]:
    order, placement = entry
    if placement.runnable:
        priority = placement.priority if placement.priority is not None else float("-inf")
        return (False, -priority, 0, order)
    return (True, 0.0, len(placement.problems), order)


def place(spec: JobSpec, resources: Iterable[LoadedResource]) -> list[Placement]:
    """Every resource's answer, best first (see the module docstring for the order)."""
    resources = list(resources)
    known = known_facts(resources)
    unknown = unknown_facts(spec, known)
    if unknown:
        raise InvalidJobSpecError(unknown)
    flavours = prepare_flavours(spec)
    answers = [
        (order, place_on(spec, loaded, flavours, known)) for order, loaded in enumerate(resources)
    ]
    return [placement for _, placement in sorted(answers, key=_rank)]
