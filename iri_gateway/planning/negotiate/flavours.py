"""Choosing among a job's image flavours on one resource (docs/design.md Contract 1).

Flavours are tried from the highest priority down (ties in declaration order). A flavour is
chosen when every requirement holds on the resource's hardware facts *and* the whole job,
with that flavour's image, runtime, options, resources and launcher, negotiates cleanly; the
first such flavour wins and the ones below it are only checked against their requirements
(they were outranked, not refused). Every flavour gets an outcome with the reason, so the
plan, the job record and placement can say why a flavour was not used.

A flavour built for GPUs whose job asks the scheduler for none would get a container with
GPUs on a node where none were reserved; so the node's GPUs are requested for it (the
site's whole-node request), and the plan says so. A requirement naming a fact no loaded
resource defines would never hold, silently: `unknown_facts` finds those before any choice.

What does not depend on the resource (parsed requirements, the order, each flavour's job) is
worked out once per job in `FlavourChoice`, so placement over many resources reuses it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

from iri_gateway.errors import JobRejectedError, Problem
from iri_gateway.models.constraints import (
    ARCH_FACT,
    Constraint,
    first_failure,
    parse_requirements,
)
from iri_gateway.models.jobspec import Container, Flavour, JobSpec, ResourceSpec
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.plan import Decision, FlavourOutcome, FlavourStatus
from iri_gateway.models.platforms import parse_platform
from iri_gateway.planning.negotiate.fields import check_nul
from iri_gateway.planning.negotiate.shape import derive_shape

GPU_FACTS = frozenset(
    {"gpu_count", "gpu_vendor", "gpu_model", "gpu_memory_gib", "nvidia_cuda", "rocm"}
)
_NO_GPU_FACTS = {"gpu_count": 0}

Negotiator = Callable[[JobSpec, LoadedResource], Decision]


@dataclass
class _Candidate:
    index: int
    flavour: Flavour
    constraints: list[Constraint]
    spec: JobSpec | None = None  # the flavour's job, built on first use


def flavour_constraints(flavour: Flavour) -> list[Constraint]:
    """The flavour's requirements, and its image's `platform` as one more on `cpu_arch`.

    The platform is a requirement like any other, so a flavour built for another machine is
    refused by the same check, with a reason naming the platform and the node's architecture.
    """
    constraints = parse_requirements(flavour.requirements)
    if flavour.platform is not None:
        arch = parse_platform(flavour.platform).arch
        constraints.append(
            Constraint(ARCH_FACT, "==", (arch,), f"== {arch} (platform {flavour.platform})")
        )
    return constraints


def _failed_field(flavour: Flavour, reason: str) -> str:
    """`platform` when the flavour's platform is what failed, else `requirements`."""
    if (
        flavour.platform is not None
        and reason.startswith(f"{ARCH_FACT} ")
        and (reason.split(":", 1)[0].endswith(f"(platform {flavour.platform})"))
    ):
        return "platform"
    return "requirements"


def demands_gpus(constraints: list[Constraint]) -> bool:
    """True when the requirements cannot hold on a node without GPUs.

    Such a flavour is built for GPUs, so its container is given the node's GPUs unless the
    job says `container.gpu` itself.
    """
    return (
        first_failure(
            [c for c in constraints if c.fact in GPU_FACTS], _NO_GPU_FACTS, "a node without GPUs"
        )
        is not None
    )


def flavour_spec(
    spec: JobSpec, container: Container, flavour: Flavour, constraints: list[Constraint]
) -> JobSpec:
    """The job as it runs with one flavour: its image, runtime, options, resources, launcher,
    and GPUs if built for them.

    Extra options add to the job's own (job level first, then the flavour's); the flavour's
    resource fields and launcher replace the job's.
    """
    options = {name: list(values) for name, values in container.extra_options.items()}
    for name, values in flavour.extra_options.items():
        options[name] = options.get(name, []) + list(values)
    gpu = container.gpu
    if gpu is None and demands_gpus(constraints):
        gpu = True
    chosen = container.model_copy(
        update={
            "image": flavour.image,
            "runtime": flavour.runtime or container.runtime,
            "extra_options": options,
            "gpu": gpu,
            "flavours": [],
        }
    )
    update: dict[str, object] = {"container": chosen}
    if flavour.resources is not None:
        own = flavour.resources
        update["resources"] = (spec.resources or ResourceSpec()).model_copy(
            update={name: getattr(own, name) for name in own.model_fields_set}
        )
    if flavour.launcher is not None:
        update["launcher"] = flavour.launcher
    return spec.model_copy(update=update)


def whole_node_gpus(spec: JobSpec, loaded: LoadedResource, sharing: int = 1) -> int | None:
    """GPUs per process that reserve every GPU of a node for a job that asks for none.

    `sharing`: how many copies of `spec` share a node (members of a cluster role). None when
    the nodes have no GPUs, or more processes share a node than it has GPUs.
    """
    gpus = loaded.resource.nodes.gpus
    if gpus is None:
        return None
    per_node = derive_shape(spec, None, []).processes_on_busiest_node * sharing
    share = gpus.count // per_node
    return share if share >= 1 else None


def _whole_node_note(
    flavour: Flavour, share: int, decision: Decision, loaded: LoadedResource, sharing: int
) -> str:
    """What the plan says when the gateway asked for a GPU flavour's GPUs on its own."""
    per_node = decision.shape.gpus_per_node * sharing
    count = loaded.resource.nodes.gpus.count if loaded.resource.nodes.gpus else per_node
    asked = (
        f"the whole node's {per_node} GPUs are requested"
        if per_node == count
        else f"{per_node} of the node's {count} GPUs are requested"
    )
    return (
        f"flavour {flavour.name!r} needs GPUs: {asked} ({share} per process; set "
        "resources.gpu_cores_per_process to ask for fewer)"
    )


def _all_flavours(spec: JobSpec) -> Iterator[tuple[str, Flavour]]:
    """Every flavour of the job with its JSON path: the job's, then each role's own."""
    if spec.container is not None:
        for index, flavour in enumerate(spec.container.flavours):
            yield f"container.flavours[{index}]", flavour
    for number, role in enumerate(spec.roles or []):
        if role.container is not None:
            for index, flavour in enumerate(role.container.flavours or []):
                yield f"roles[{number}].container.flavours[{index}]", flavour


def unknown_facts(spec: JobSpec, known: Collection[str]) -> list[Problem]:
    """A problem for every requirement naming a fact no loaded resource defines (a typo or a
    label of no site), with the closest known fact names; such a requirement would otherwise
    never hold and the flavour never be chosen, silently."""
    problems = []
    names = sorted(known)
    for where, flavour in _all_flavours(spec):
        for fact in flavour.requirements:
            if fact in known:
                continue
            closest = difflib.get_close_matches(fact, names, n=3, cutoff=0.6)
            problems.append(
                Problem(
                    f"{where}.requirements.{fact}",
                    f"flavour {flavour.name!r}: no loaded resource defines the fact {fact!r}"
                    + (
                        "; the closest known facts are offered"
                        if closest
                        else "; the known facts are offered"
                    ),
                    ", ".join(closest or names),
                )
            )
    return problems


def _outcome(flavour: Flavour, status: FlavourStatus, reason: str | None) -> FlavourOutcome:
    return FlavourOutcome(flavour.name, flavour.priority, status, reason)


def _flavour_field(index: int, problem: Problem) -> str:
    """Where a problem of a flavour's job points: fields the flavour set are its own."""
    prefix = f"container.flavours[{index}]"
    for own in ("container.image", "container.runtime", "container.extra_options"):
        if problem.field == own or problem.field.startswith((own + ".", own + "[")):
            return prefix + problem.field[len("container") :]
    return problem.field


def _flavour_origin(index: int, flavour: Flavour, problem: Problem) -> str:
    """As `_flavour_field`, and the resource fields and launcher the flavour set are its own."""
    head = problem.field.split(".", 1)
    if flavour.launcher is not None and problem.field == "launcher":
        return f"container.flavours[{index}].launcher"
    if (
        flavour.resources is not None
        and head[0] == "resources"
        and len(head) == 2
        and (head[1] in flavour.resources.model_fields_set)
    ):
        return f"container.flavours[{index}].{problem.field}"
    return _flavour_field(index, problem)


class FlavourChoice:
    """One job's flavours, ready to be matched against any number of resources."""

    def __init__(self, spec: JobSpec, container: Container, sharing: int = 1) -> None:
        """`sharing`: copies of `spec` on one node (a cluster role's members per node)."""
        self.spec = spec
        self.container = container
        self.sharing = sharing
        self.candidates = sorted(
            (
                _Candidate(index, flavour, flavour_constraints(flavour))
                for index, flavour in enumerate(container.flavours)
            ),
            key=lambda c: (-c.flavour.priority, c.index),
        )
        # NUL anywhere refuses the job on every resource; checked once here, so each
        # flavour's negotiation need not search the same text again.
        self.nul_problems: list[Problem] = []
        check_nul(spec, self.nul_problems)

    def _spec_of(self, candidate: _Candidate) -> JobSpec:
        if candidate.spec is None:
            candidate.spec = flavour_spec(
                self.spec, self.container, candidate.flavour, candidate.constraints
            )
        return candidate.spec

    def decide(self, loaded: LoadedResource, negotiate_one: Negotiator) -> Decision:
        """The decision for the best flavour `loaded` runs; JobRejectedError naming each reason."""
        if self.nul_problems:
            raise JobRejectedError(loaded.id, self.nul_problems)
        container = self.container
        outcomes: dict[int, FlavourOutcome] = {}
        problems: list[Problem] = []
        seen: set[tuple[str, str]] = set()
        chosen: tuple[_Candidate, Decision] | None = None
        for candidate in self.candidates:
            flavour = candidate.flavour
            failed = first_failure(candidate.constraints, loaded.facts, loaded.id)
            if failed is not None:
                outcomes[candidate.index] = _outcome(flavour, "rejected", failed)
                problems.append(
                    Problem(
                        f"container.flavours[{candidate.index}]." + _failed_field(flavour, failed),
                        f"flavour {flavour.name!r}: {failed}",
                    )
                )
                continue
            if chosen is not None:
                winner = chosen[0].flavour
                outcomes[candidate.index] = _outcome(
                    flavour,
                    "outranked",
                    f"{winner.name!r} (priority {winner.priority}) was chosen",
                )
                continue
            spec, share = self._spec_of(candidate), None
            # A site that refuses GPUs without a count (gpu_default_request: refuse) gets
            # none asked for here: the flavour's negotiation then refuses, naming the field.
            if (
                container.gpu is not False
                and demands_gpus(candidate.constraints)
                and (spec.resources is None or spec.resources.gpu_cores_per_process is None)
                and loaded.resource.scheduler.gpu_default_request == "whole-node"
            ):
                share = whole_node_gpus(spec, loaded, self.sharing)
            if share is not None:
                resources = (spec.resources or ResourceSpec()).model_copy(
                    update={"gpu_cores_per_process": share}
                )
                spec = spec.model_copy(update={"resources": resources})
            try:
                decision = negotiate_one(spec, loaded)
            except JobRejectedError as error:
                first = error.problems[0]
                outcomes[candidate.index] = _outcome(
                    flavour,
                    "rejected",
                    f"{_flavour_origin(candidate.index, flavour, first)}: {first.reason}",
                )
                for problem in error.problems:
                    mapped = Problem(
                        _flavour_origin(candidate.index, flavour, problem),
                        f"flavour {flavour.name!r}: {problem.reason}",
                        problem.offered,
                    )
                    if (mapped.field, problem.reason) not in seen:
                        seen.add((mapped.field, problem.reason))
                        problems.append(mapped)
                continue
            outcomes[candidate.index] = _outcome(flavour, "chosen", None)
            if share is not None:
                decision.warnings.append(
                    _whole_node_note(flavour, share, decision, loaded, self.sharing)
                )
            if decision.use_gpu and decision.shape.gpus_per_node == 0 and (container.gpu is None):
                decision.warnings.append(
                    f"flavour {flavour.name!r} is built for GPUs: its container is given the "
                    "node's GPUs, but the job asks the scheduler for none "
                    "(set resources.gpu_cores_per_process to reserve them)"
                )
            chosen = (candidate, decision)
        ordered = [outcomes[index] for index in range(len(container.flavours))]
        if chosen is not None:
            decision = chosen[1]
            decision.flavour = chosen[0].flavour.name
            decision.flavours = ordered
            return decision
        if container.image is None:
            raise JobRejectedError(loaded.id, problems)
        decision = negotiate_one(
            self.spec.model_copy(
                update={"container": container.model_copy(update={"flavours": []})}
            ),
            loaded,
        )
        decision.flavours = ordered
        decision.warnings.insert(0, f"no flavour fits {loaded.id}; container.image is used")
        return decision
