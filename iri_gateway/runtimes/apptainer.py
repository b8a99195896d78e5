"""Apptainer (and SingularityCE): `apptainer exec|run [options] IMAGE [command]`.

Job environment travels as `APPTAINERENV_<NAME>` host variables (exported by the fragment),
not as `--env`, whose comma-separated parsing would split values containing commas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iri_gateway.models import images
from iri_gateway.models.images import ImageRef
from iri_gateway.runtimes.base import Invocation, Runtime, command_of, site_binds, site_flags
from iri_gateway.shell import SiteWord

if TYPE_CHECKING:
    from iri_gateway.models.plan import Decision


class Apptainer(Runtime):
    name = "apptainer"
    program = "apptainer"
    image_forms = frozenset(
        {
            "oci",
            "docker-uri",
            "oras-uri",
            "library-uri",
            "shub-uri",
            "sif",
            "squashfs",
            "sandbox",
            "shifter",
        }
    )
    rank = 10
    supports_network_none = True
    supports_cdi = True  # in OCI mode only
    oci_mode_flag = "--oci"

    def image_reference(self, ref: ImageRef) -> str | None:
        return images.for_apptainer(ref)

    def invocation(self, decision: Decision) -> Invocation:
        options: list[str] = ["exec" if decision.spec.executable else "run"]
        config = decision.runtime_config
        if config is not None and config.oci_mode:
            options.append(SiteWord(self.oci_mode_flag))
        options += site_flags(decision)
        if not decision.spec.inherit_environment:
            options.append("--cleanenv")
        for bind in site_binds(decision):
            options += ["--bind", bind]
        for mount in decision.mounts:
            options += ["--bind", mount.bind_spec()]
        for device in decision.devices:
            options += ["--device", device]
        if decision.network == "none":
            options += ["--net", "--network", "none"]
        if decision.workdir is not None:
            options += ["--cwd", decision.workdir]
        options += decision.extra_options
        return Invocation(
            executable=self.executable(decision),
            options=options,
            image=decision.image,
            command=command_of(decision),
            container_env=dict(decision.environment),
        )


RUNTIME = Apptainer()
