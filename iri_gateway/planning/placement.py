"""Where can this job run? Every resource ranked, with the flavour each would use or why not.

Placement negotiates the job on every resource given (no script is rendered: the answer is
the decision, not the batch file) and ranks the results: resources that can run the job
first, best chosen flavour priority first, then in the order the resources were loaded;
then the others, fewest problems first. Pure: no I/O, shared by the API and the CLI.
"""

from __future__ import annotations

from collections.abc import Iterable

from iri_gateway.errors import JobRejectedError
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.placement import Placement, PlacementProblem
from iri_gateway.planning.negotiate import FlavourChoice, negotiate, prepare_flavours


# Placements are built with `model_construct`: every value comes from validated models and
# plain strings, and placement over many resources is on the path users wait for.
def place_on(
    spec: JobSpec, loaded: LoadedResource, flavours: FlavourChoice | None = None
) -> Placement:
    """The answer of one resource (`flavours`: the job's prepared flavours, if any)."""
    facility = loaded.profile.facility.id
    try:
        decision = negotiate(spec, loaded, flavours)
    except JobRejectedError as error:
        return Placement.model_construct(
            resource=loaded.id, facility=facility, runnable=False, flavour=None, priority=None,
            runtime=None, queue=None, image=None, flavours=[], warnings=[],
            problems=[PlacementProblem.model_construct(name=p.field, reason=p.reason,
                                                       offered=p.offered)
                      for p in error.problems],
        )
    chosen = next((f for f in decision.flavours if f.status == "chosen"), None)
    return Placement.model_construct(
        resource=loaded.id, facility=facility, runnable=True, flavour=decision.flavour,
        priority=chosen.priority if chosen else None, runtime=decision.runtime,
        queue=decision.queue.name if decision.queue else None, image=decision.image,
        flavours=list(decision.flavours), warnings=list(decision.warnings), problems=[],
    )


def _rank(entry: tuple[int, Placement]) -> tuple[bool, float, int, int]:
    order, placement = entry
    if placement.runnable:
        priority = placement.priority if placement.priority is not None else float("-inf")
        return (False, -priority, 0, order)
    return (True, 0.0, len(placement.problems), order)


def place(spec: JobSpec, resources: Iterable[LoadedResource]) -> list[Placement]:
    """Every resource's answer, best first (see the module docstring for the order)."""
    flavours = prepare_flavours(spec)
    answers = [(order, place_on(spec, loaded, flavours))
               for order, loaded in enumerate(resources)]
    return [placement for _, placement in sorted(answers, key=_rank)]
