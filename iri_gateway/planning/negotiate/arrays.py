"""A job array against a resource: whether its scheduler runs arrays, within which limits,
and what each element is told (`IRI_ARRAY_INDEX`).

The scheduler's own rules are its plug-in's (`ArrayRules`: Slurm bounds the largest index,
PBS the number of elements and takes one range only); the limit is the profile's
`scheduler.max_array_size`, or the scheduler's default. An array's output paths should say
`%a` (each element's index) or every element writes the same file: said as a warning, since
a job may mean it (appending to one log).
"""

from __future__ import annotations

from iri_gateway.errors import Problem
from iri_gateway.models.job_arrays import INDEX_PATTERN, INDEX_VARIABLE
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.profile import Resource
from iri_gateway.shell import SiteWord


def check_array(
    spec: JobSpec, resource: Resource, problems: list[Problem], warnings: list[str]
) -> dict[str, str]:
    """Problems of `spec.array` on `resource`; the environment every element gets."""
    array = spec.array
    if array is None:
        if INDEX_PATTERN in (spec.stdout_path or "") + (spec.stderr_path or ""):
            warnings.append(
                f"{INDEX_PATTERN} in an output path is an array element's index; this job is "
                "not an array, so it stays as written"
            )
        return {}
    rules = resource.scheduler.facts.arrays
    if rules is None:
        problems.append(
            Problem(
                "array",
                f"the scheduler of {resource.id} runs no job arrays",
                "one job per index, in one bulk launch (POST /api/v2/compute/jobs/{resource})",
            )
        )
        return {}
    if INDEX_VARIABLE in spec.environment:
        problems.append(
            Problem(
                f"environment.{INDEX_VARIABLE}",
                "set by the gateway for each element of an array (its index); leave it out",
            )
        )
    size = resource.scheduler.max_array_size or rules.default_size
    for field, reason, offered in rules.refusals(array.elements(), size=size):
        problems.append(Problem(field, reason, offered))
    for name in ("stdout_path", "stderr_path"):
        path = getattr(spec, name)
        if path is not None and INDEX_PATTERN not in path:
            warnings.append(
                f"{name} {path!r} has no {INDEX_PATTERN}: every element of the array writes "
                f"to the same file (put {INDEX_PATTERN} where each element's index goes)"
            )
    return {INDEX_VARIABLE: SiteWord(f"${{{rules.index_variable}}}")}
