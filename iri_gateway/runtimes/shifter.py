"""Shifter (NERSC): `shifter [--image=...] [options] -- command`.

Under Slurm the image and volumes go into the batch header as SPANK options
(`#SBATCH --image=`, `#SBATCH --volume=`) so every node prepares them before the job starts,
as NERSC recommends; elsewhere they are command-line options.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iri_gateway.models import images
from iri_gateway.models.images import ImageRef
from iri_gateway.runtimes.base import (
    Invocation,
    Runtime,
    command_of,
    env_assignment,
    site_binds,
    site_flags,
)
from iri_gateway.shell import SiteWord

if TYPE_CHECKING:
    from iri_gateway.models.plan import Decision


class Shifter(Runtime):
    name = "shifter"
    program = "shifter"
    image_forms = frozenset({"oci", "docker-uri", "shifter"})
    rank = 30
    binds_hosts_file = False
    slurm_spank_options = True

    def image_reference(self, ref: ImageRef) -> str | None:
        return images.for_shifter(ref)

    def invocation(self, decision: Decision) -> Invocation:
        volumes = [mount.bind_spec(rw_suffix=False) for mount in decision.mounts]
        spank = decision.resource.resource.scheduler.facts.container_directives
        options: list[str] = []
        scheduler_options: list[tuple[str, str]] = []
        if spank:
            if decision.image is not None:
                scheduler_options.append(("image", decision.image))
            if volumes:
                scheduler_options.append(("volume", ";".join(volumes)))
        else:
            if decision.image is not None:
                options.append(f"--image={decision.image}")
            options += [f"--volume={volume}" for volume in volumes]
        options += _merge_modules([*site_flags(decision), *decision.extra_options])
        options += [f"--volume={bind}" for bind in site_binds(decision)]
        if not decision.spec.inherit_environment:
            options.append("--clearenv")
        options += [env_assignment(k, v, "--env=") for k, v in decision.environment.items()]
        if decision.workdir is not None:
            workdir = f"--workdir={decision.workdir}"
            options.append(SiteWord(workdir) if isinstance(decision.workdir, SiteWord) else workdir)
        if decision.spec.executable is None:
            options.append("--entrypoint")
        return Invocation(
            executable=self.executable(decision),
            options=options,
            image=decision.image,
            command=command_of(decision),
            scheduler_options=scheduler_options,
        )


def _merge_modules(flags: list[str]) -> list[str]:
    """Shifter takes one `--module=a,b` list; a second `--module` would replace the first."""
    modules = [f.removeprefix("--module=") for f in flags if f.startswith("--module=")]
    others = [f for f in flags if not f.startswith("--module=")]
    if not modules:
        return others
    # A plain (single-quoted) word: user module names from extra options may be in it.
    return [*others, "--module=" + ",".join(dict.fromkeys(modules))]


RUNTIME = Shifter()
