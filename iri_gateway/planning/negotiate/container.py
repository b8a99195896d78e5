"""Container checks: runtime, image form, GPUs and CDI devices, MPI, mounts, network, options."""

from __future__ import annotations

import difflib
import posixpath
import re
from dataclasses import dataclass, field
from functools import lru_cache

from iri_gateway.errors import Problem
from iri_gateway.models.images import ImageFormError, parse_image
from iri_gateway.models.jobspec import CONTAINER_ALIASES, Container, VolumeMount
from iri_gateway.models.plan import Mount
from iri_gateway.models.profile import Resource, RuntimeConfig, device_offered
from iri_gateway.runtimes import RUNTIMES, Runtime
from iri_gateway.shell import SiteWord, has_control_characters

_MOUNT_FORBIDDEN = re.compile(r"[:,;]")


@dataclass
class ContainerChoice:
    """The runtime and container settings negotiation settled on."""

    runtime: Runtime
    config: RuntimeConfig | None
    image: str | None = None
    image_form: str | None = None
    gpu_flags: list[SiteWord] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    extra_options: list[str] = field(default_factory=list)


def choose_runtime(
    container: Container | None, resource: Resource, problems: list[Problem]
) -> ContainerChoice | None:
    """The runtime asked for, else the resource's default; None (with a problem) if absent."""
    if container is None:
        return ContainerChoice(RUNTIMES["none"], None)
    wanted = container.runtime or resource.runtimes.default
    offered = ", ".join([*resource.runtimes.available(), "none"])
    if wanted == "none":
        return ContainerChoice(RUNTIMES["none"], None)
    config = resource.runtimes.get(wanted)
    if config is None:
        problems.append(
            Problem(
                "container.runtime", f"{resource.id} does not offer runtime {wanted!r}", offered
            )
        )
        return None
    return ContainerChoice(RUNTIMES[wanted], config)


def check_unknown_fields(container: Container, problems: list[Problem]) -> None:
    """A field this gateway does not know is refused, with the closest known name.

    The official `Container` allows extra fields, so the model accepts them; but a field
    the gateway ignored would run the job other than asked (`network_mode: none` on the
    host network), so negotiation refuses it instead.
    """
    for key in container.model_extra or {}:
        problems.append(_unknown(f"container.{key}", key, _CONTAINER_FIELDS))
    for index, mount in enumerate(container.volume_mounts):
        for key in mount.model_extra or {}:
            problems.append(
                _unknown(
                    f"container.volume_mounts[{index}].{key}", key, tuple(VolumeMount.model_fields)
                )
            )


_CONTAINER_FIELDS = (*Container.model_fields, *CONTAINER_ALIASES)


def _unknown(where: str, key: str, known: tuple[str, ...]) -> Problem:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    offered = f"did you mean {close[0]!r}? known: " if close else "known: "
    return Problem(where, "not a field this gateway knows", offered + ", ".join(sorted(known)))


def check_image(
    container: Container, choice: ContainerChoice, resource_id: str, problems: list[Problem]
) -> None:
    """The image must be a known form that both the runtime and the site accept."""
    config = choice.config
    if config is None:
        return
    if container.image is None:
        problems.append(Problem("container.image", "required unless flavours are given"))
        return
    try:
        ref = parse_image(container.image)
    except ImageFormError as error:
        problems.append(Problem("container.image", str(error)))
        return
    accepted = [f for f in config.image_forms if f in choice.runtime.image_forms]
    translated = choice.runtime.image_reference(ref) if ref.form in accepted else None
    if translated is None:
        problems.append(
            Problem(
                "container.image",
                f"{choice.runtime.name} on {resource_id} does not accept {ref.form} images",
                ", ".join(accepted),
            )
        )
        return
    choice.image, choice.image_form = translated, ref.form


def check_gpu(
    container: Container,
    choice: ContainerChoice,
    use_gpu: bool,
    resource: Resource,
    problems: list[Problem],
) -> None:
    """GPUs go in by CDI devices when named (or by default), else by the vendor flags.

    A resource without GPUs is reported once, by the hardware check, not again here.
    """
    config = choice.config
    if config is None:
        return
    binding = config.gpu
    name = choice.runtime.name
    if container.devices:
        offered = binding.cdi_devices if binding else []
        instead = "vendor GPU flags via container.gpu" if binding and binding.flags else None
        if choice.runtime.supports_cdi and not choice.runtime.injects_cdi(config):
            problems.append(
                Problem(
                    "container.devices",
                    f"{name} injects CDI devices only in OCI mode "
                    f"({choice.runtime.oci_mode_flag}), which {resource.id} does not run it in "
                    f"(the profile's runtimes.{name}.oci_mode)",
                    instead,
                )
            )
        elif not offered or not choice.runtime.supports_cdi:
            problems.append(
                Problem(
                    "container.devices",
                    f"{name} here cannot inject CDI devices",
                    instead,
                )
            )
        else:
            for index, device in enumerate(container.devices):
                if not device_offered(device, offered):
                    problems.append(
                        Problem(
                            f"container.devices[{index}]",
                            f"CDI device {device!r} is not offered",
                            ", ".join(offered),
                        )
                    )
            choice.devices = list(container.devices)
    if not use_gpu or resource.nodes.gpus is None:
        return
    if binding is None:
        problems.append(
            Problem(
                "container.gpu", f"runtime {name} has no GPU binding on this resource", "gpu: false"
            )
        )
        return
    if container.devices:
        return
    if binding.default_devices and choice.runtime.injects_cdi(config):
        choice.devices = list(binding.default_devices)
    elif binding.flags or binding.env:
        choice.gpu_flags = [SiteWord(flag) for flag in binding.flags]
    else:
        # Only named CDI devices reach the GPUs here; without a name nothing would, and a GPU
        # job that silently runs without GPUs is worse than a refusal.
        problems.append(
            Problem(
                "container.devices",
                f"{name} here gives GPUs only as named CDI devices, and the site names no default",
                ", ".join(binding.cdi_devices),
            )
        )


def check_mpi(choice: ContainerChoice, resource: Resource, problems: list[Problem]) -> None:
    """MPI in a container needs the site's MPI and a binding for the chosen runtime."""
    if resource.mpi is None:
        problems.append(
            Problem(
                "container.mpi", f"{resource.id} has no MPI", "mpi: false, or launcher 'single'"
            )
        )
        return
    if choice.config is not None and choice.runtime.mpi_refusal is not None:
        problems.append(
            Problem(
                "container.mpi",
                f"{choice.runtime.name}: {choice.runtime.mpi_refusal}",
                "mpi: false (one process per node, no ranks)",
            )
        )
    elif choice.config is not None and choice.config.mpi is None:
        with_mpi = [
            n
            for n in resource.runtimes.available()
            if (c := resource.runtimes.get(n)) is not None and c.mpi is not None
        ]
        problems.append(
            Problem(
                "container.mpi",
                f"runtime {choice.runtime.name} cannot bind {resource.mpi.flavour} here",
                ", ".join(with_mpi) or "no runtime here binds MPI",
            )
        )


def check_mounts(container: Container, choice: ContainerChoice, problems: list[Problem]) -> None:
    """Mount paths must be absolute, clean, expressible, and (sources) inside the allow-list."""
    config = choice.config
    if config is None:
        if container.volume_mounts:
            problems.append(
                Problem(
                    "container.volume_mounts", "mounts need a container runtime", "runtime: none"
                )
            )
        return
    policy = config.mounts
    for index, mount in enumerate(container.volume_mounts):
        where = f"container.volume_mounts[{index}]"
        bad = _path_problem(mount.source, f"{where}.source") or _path_problem(
            mount.target, f"{where}.target"
        )
        if bad:
            problems.append(bad)
            continue
        if not any(_under(mount.source, prefix) for prefix in policy.allowed_sources):
            problems.append(
                Problem(
                    f"{where}.source",
                    f"{mount.source!r} is outside the paths this site lets jobs mount",
                    ", ".join(policy.allowed_sources) or "no mounts",
                )
            )
            continue
        if not mount.read_only and not policy.read_write:
            problems.append(
                Problem(
                    f"{where}.read_only",
                    "only read-only mounts are allowed here",
                    "read_only: true",
                )
            )
            continue
        refusal = choice.runtime.read_only_refusal
        if mount.read_only and refusal is not None:
            problems.append(
                Problem(
                    f"{where}.read_only",
                    f"{choice.runtime.name} cannot mount read-only: {refusal}",
                    "read_only: false" if policy.read_write else "no mounts with this runtime",
                )
            )
            continue
        choice.mounts.append(Mount(mount.source, mount.target, mount.read_only))


@lru_cache(maxsize=256)
def _compiled(patterns: tuple[str, ...]) -> list[re.Pattern[str]]:
    return [re.compile(pattern) for pattern in patterns]


def _path_problem(path: str, where: str) -> Problem | None:
    if not path.startswith("/"):
        return Problem(where, f"{path!r} is relative; mount paths must be absolute")
    if ".." in path.split("/"):
        return Problem(where, f"{path!r} contains '..'")
    if _MOUNT_FORBIDDEN.search(path) or has_control_characters(path):
        return Problem(
            where,
            f"{path!r} contains ':', ',', ';' or a control character, which runtimes' "
            "mount syntax cannot express",
        )
    return None


def _under(path: str, prefix: str) -> bool:
    """True when `path` is `prefix` or inside it, comparing whole path components.

    Profile prefixes are normalised when the profile loads.
    """
    path = posixpath.normpath(path)
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def check_entrypoint(choice: ContainerChoice, has_command: bool, problems: list[Problem]) -> None:
    """A runtime that cannot run an image's own entrypoint needs a command."""
    refusal = choice.runtime.entrypoint_refusal
    if refusal is not None and choice.config is not None and not has_command:
        problems.append(
            Problem(
                "executable",
                f"{choice.runtime.name} cannot run the image's entrypoint: {refusal}",
                "executable (the program in the image)",
            )
        )


def check_network(container: Container, choice: ContainerChoice, problems: list[Problem]) -> None:
    """`network: none` needs a runtime and site that can isolate the network."""
    config = choice.config
    if container.network == "host" or config is None:
        return
    if container.network not in config.networks or not choice.runtime.supports_network_none:
        problems.append(
            Problem(
                "container.network",
                f"{choice.runtime.name} here cannot run without a network",
                ", ".join(config.networks),
            )
        )


def check_extra_options(
    container: Container, choice: ContainerChoice, problems: list[Problem]
) -> None:
    """Options for the chosen runtime must match the site's allow-list; others are unused."""
    for runtime_name in container.extra_options:
        if runtime_name not in RUNTIMES:
            problems.append(
                Problem(
                    f"container.extra_options.{runtime_name}",
                    "not a runtime name",
                    ", ".join(RUNTIMES.names()),
                )
            )
    config = choice.config
    options = container.extra_options.get(choice.runtime.name, [])
    if config is None:
        return
    patterns = _compiled(tuple(config.allowed_extra_options))
    for index, option in enumerate(options):
        if not any(p.fullmatch(option) for p in patterns):
            problems.append(
                Problem(
                    f"container.extra_options.{choice.runtime.name}[{index}]",
                    f"{option!r} is not on the site's allow-list for {choice.runtime.name}",
                    ", ".join(config.allowed_extra_options) or "no extra options",
                )
            )
    choice.extra_options = list(options)
