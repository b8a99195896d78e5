"""Podman: `podman run --rm [options] IMAGE [command]`, also the base of podman-hpc.

The user's executable replaces the image's entrypoint through `--entrypoint` in its JSON-array
form, which podman takes literally whatever characters the path holds.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from iri_gateway.models import images
from iri_gateway.models.images import ImageRef
from iri_gateway.runtimes.base import Invocation, Runtime, env_assignment, site_binds, site_flags
from iri_gateway.shell import SiteWord

if TYPE_CHECKING:
    from iri_gateway.models.plan import Decision


class Podman(Runtime):
    name = "podman"
    program = "podman"
    image_forms = frozenset({"oci", "docker-uri", "shifter"})
    rank = 40
    supports_network_none = True
    supports_cdi = True
    binds_job_directory = True

    def image_reference(self, ref: ImageRef) -> str | None:
        return images.for_podman(ref)

    def invocation(self, decision: Decision) -> Invocation:
        options: list[str] = ["run", "--rm"]
        options += site_flags(decision)
        options += ["--network", decision.network]
        for bind in site_binds(decision):
            options += ["--volume", bind]
        for mount in decision.mounts:
            options += ["--volume", mount.bind_spec()]
        for device in decision.devices:
            options += ["--device", device]
        for key, value in decision.environment.items():
            options += ["--env", env_assignment(key, value)]
        if decision.workdir is not None:
            if isinstance(decision.workdir, SiteWord):  # the job directory: podman needs it bound
                options += ["--volume", SiteWord(f"{decision.workdir}:{decision.workdir}:rw")]
            options += ["--workdir", decision.workdir]
        if decision.spec.stdin_path is not None:
            options.append("--interactive")  # without it the container's stdin is empty
        if decision.spec.executable is not None:
            options.append("--entrypoint=" + json.dumps([decision.spec.executable]))
        options += decision.extra_options
        return Invocation(
            executable=self.executable(decision),
            options=options,
            image=decision.image,
            command=list(decision.spec.arguments),
        )


RUNTIME = Podman()
