"""Charliecloud (LANL): `ch-run [options] IMAGE -- command`, fully unprivileged.

Image forms: a directory (`/images/app/`) or SquashFS file (`/images/app.sqfs`) on the shared
filesystem runs as it is; a registry reference runs by name from `ch-image` storage
(`$CH_IMAGE_STORAGE`, the site's image cache), where the profile's staging command
(`ch-image pull`) puts it. The GPU and MPI bindings' flags are `ch-fromhost` options (its
`--nvidia`, `--cray-mpi`, `-p LIB`): they inject the host's libraries into a staged image once,
right after staging, never per rank and never into a user's own image.

Command line, as Charliecloud 0.31 behaves (docs/runtimes-real.md): `--unset-env='*'` first
when the job does not inherit the host environment (options apply in order), then
`--env-no-expand` and one `--set-env=NAME=VALUE` per variable (without `--env-no-expand`
ch-run expands `$` in values, and an argument without `=` would name a file to read), `-b
SRC:DST` per bind, `-c DIR` always (ch-run would start in `/`), the image, `--`, the command.
`-b` has no read-only form, and the image is mounted read-only so a bind's target must already
exist in it (ch-convert's images have `/mnt/0`..`/mnt/9`): the target is passed as written and
ch-run refuses a missing one when the job starts.
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
    mpi_flags,
    site_binds,
    site_words,
)
from iri_gateway.shell import SiteWord

if TYPE_CHECKING:
    from iri_gateway.models.plan import Decision

_PATH_FORMS = ("sandbox", "squashfs")
_STORAGE = "${CH_IMAGE_STORAGE:-/var/tmp/$USER.ch}"
"""ch-image's storage directory, as ch-image and ch-run find it (0.31's default)."""
JOB_DIRECTORY = SiteWord("$PWD")
_USER = SiteWord("USER=${USER:-$(id -un)}")
_AWAY = SiteWord("CH_IMAGE_STORAGE=/nonexistent/iri-gateway")


def storage_path(name: str) -> SiteWord:
    """Where `ch-image pull NAME` unpacks an image: `img/NAME` in storage, with '/' written
    '%' and ':' written '+' (ch-image's `Reference.for_path`). One site word, so the storage
    variable expands; the name is an OCI reference (checked when the job was parsed), which
    holds none of the characters a double-quoted word would interpret."""
    if any(c in name for c in '$`"\\'):
        raise ValueError(f"not an OCI reference: {name!r}")
    return SiteWord(f"{_STORAGE}/img/" + name.replace(":", "+").replace("/", "%"))


class Charliecloud(Runtime):
    name = "charliecloud"
    program = "ch-run"
    image_forms = frozenset({"oci", "docker-uri", "sandbox", "squashfs"})
    rank = 50
    read_only_refusal = (
        "its bind option (-b SRC:DST) has no read-only form (Charliecloud 0.31, and none up "
        "to 0.38); the bind is as writable as its source"
    )
    entrypoint_refusal = "ch-run runs a command, never an image's entrypoint"

    def image_reference(self, ref: ImageRef) -> str | None:
        if ref.form in _PATH_FORMS:
            return ref.text
        return images.qualified_oci_name(ref)

    def staging_commands(self, decision: Decision) -> list[list[str]]:
        """Only registry images are staged: paths run as they are. After the pull, the GPU
        and MPI bindings' `ch-fromhost` options inject the host's libraries into the staged
        image (a directory in storage)."""
        config = decision.runtime_config
        if decision.image_form in _PATH_FORMS or config is None or decision.image is None:
            return []
        # ch-image, like ch-run, refuses to start without USER (a service's environment
        # may lack it); the launch line sets it again for jobs that stage nothing.
        commands: list[list[str]] = [
            [SiteWord("export"), _USER],
            *super().staging_commands(decision),
        ]
        inject = [*decision.gpu_flags, *mpi_flags(decision)]
        if inject:
            # ch-fromhost runs `ch-run IMAGE-FOLDER` for libraries, which ch-run 0.31 refuses
            # inside its storage ("can't run directory images from storage"); the folder is
            # expanded first, then ch-fromhost runs with the storage variable pointed away.
            commands.append(
                [
                    SiteWord("env"),
                    _AWAY,
                    SiteWord("ch-fromhost"),
                    *inject,
                    storage_path(decision.image),
                ]
            )
        return commands

    def invocation(self, decision: Decision) -> Invocation:
        config = decision.runtime_config
        options: list[str] = site_words(config.flags) if config is not None else []
        if not decision.spec.inherit_environment:
            options.append("--unset-env=*")
        options.append("--env-no-expand")
        options += [env_assignment(k, v, "--set-env=") for k, v in decision.environment.items()]
        for bind in site_binds(decision):
            if bind in decision.binds:
                # The gateway's own binds (a cluster member's hosts file) end in ':ro', which
                # ch-run would take as part of the destination.
                bind = SiteWord(bind.removesuffix(":ro"))
            options += ["-b", bind]
        for mount in decision.mounts:
            options += ["-b", f"{mount.source}:{mount.target}"]
        workdir = decision.workdir if decision.workdir is not None else JOB_DIRECTORY
        options += ["-c", workdir]
        options += decision.extra_options
        return Invocation(
            executable=self.executable(decision),
            options=options,
            image=decision.image,
            command=command_of(decision),
        )


RUNTIME = Charliecloud()
