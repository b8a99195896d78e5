"""Container image references: recognise the form a user wrote, translate it per runtime.

Users write images the way their tools do: an OCI reference (`docker.io/library/ubuntu:22.04`,
`ubuntu:22.04`), an Apptainer URI (`docker://...`, `oras://...`, `library://...`), a Shifter
name (`docker:ubuntu:22.04`) or a file on the shared filesystem (`/images/app.sif`). Each
runtime understands some of these; the `for_<runtime>` functions give the reference in a
runtime's own form, or None when it cannot use that form at all. This module imports nothing of
the gateway: the JobSpec, the profile and the runtime plug-ins all use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

ImageForm = Literal[
    "oci",
    "docker-uri",
    "oras-uri",
    "library-uri",
    "shub-uri",
    "sif",
    "squashfs",
    "sandbox",
    "shifter",
]
"""The forms of image reference the gateway recognises; a runtime runs some of them."""

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"(?:{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?)"
_OCI = re.compile(
    rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,})?\Z"
)
_URI_FORMS: dict[str, ImageForm] = {
    "docker://": "docker-uri",
    "oras://": "oras-uri",
    "library://": "library-uri",
    "shub://": "shub-uri",
}
_FILE_SUFFIXES: dict[str, ImageForm] = {
    ".sif": "sif",
    ".sqsh": "squashfs",
    ".sqfs": "squashfs",
    ".squashfs": "squashfs",
    ".img": "squashfs",
}


@dataclass(frozen=True)
class ImageRef:
    """An image as the user wrote it, and the form it was recognised as."""

    text: str
    form: ImageForm


class ImageFormError(ValueError):
    """The text is not an image reference in any form the gateway knows."""


def parse_image(text: str) -> ImageRef:
    """Recognise the form of an image reference; ImageFormError says why it is none."""
    for prefix, form in _URI_FORMS.items():
        if text.startswith(prefix):
            rest = text[len(prefix) :]
            if form == "docker-uri" and not _OCI.match(rest):
                raise ImageFormError(f"{rest!r} after docker:// is not an OCI image reference")
            if not rest or any(c.isspace() for c in rest):
                raise ImageFormError(f"{text!r} is not a valid {prefix} URI")
            return ImageRef(text, form)
    if text.startswith("/"):
        if text.endswith("/"):
            return ImageRef(text, "sandbox")
        for suffix, form in _FILE_SUFFIXES.items():
            if text.endswith(suffix):
                return ImageRef(text, form)
        raise ImageFormError(
            "an image file must end in .sif, .sqsh, .sqfs, .squashfs or .img (or '/' for a "
            "sandbox folder)"
        )
    if any(text.endswith(suffix) for suffix in _FILE_SUFFIXES) and ":" not in text:
        raise ImageFormError(
            f"{text!r} looks like an image file; give its absolute path (e.g. /path/{text})"
        )
    if text.startswith("docker:"):
        rest = text.removeprefix("docker:")
        if _OCI.match(rest):
            return ImageRef(text, "shifter")
    if _OCI.match(text):
        return ImageRef(text, "oci")
    raise ImageFormError(
        "not an OCI reference ([registry/]name[:tag][@digest], lower-case name), a URI "
        "(docker://, oras://, library://, shub://), a Shifter name (docker:name:tag) or an "
        "absolute image file path"
    )


def oci_name(ref: ImageRef) -> str | None:
    """The plain OCI reference behind forms that carry one, else None."""
    if ref.form == "oci":
        return ref.text
    if ref.form == "docker-uri":
        return ref.text.removeprefix("docker://")
    if ref.form == "shifter":
        return ref.text.removeprefix("docker:")
    return None


DEFAULT_REGISTRY = "docker.io"
"""Where a name without a registry lives, as Docker, Apptainer's docker:// and Shifter read it."""
_HUB_ALIASES = ("index.docker.io", "registry-1.docker.io")


def qualified(name: str) -> str:
    """A plain OCI reference with its registry spelled out: `jhnnsrs/app:1` ->
    `docker.io/jhnnsrs/app:1`, `ubuntu:22.04` -> `docker.io/library/ubuntu:22.04`.

    Why: Podman and podman-hpc refuse a short name unless the host configures a search
    registry (and then may pick a different one than Docker would), while Apptainer and
    Shifter read it as Docker Hub. Qualifying it once, the way Docker normalises names, gives
    every runtime the same image. The first component is a registry when it has a '.' or ':',
    is `localhost`, or has capitals (Docker's rule); anything else is a Docker Hub path.
    """
    first, slash, rest = name.partition("/")
    if slash and (any(c in first for c in ".:") or first == "localhost" or first != first.lower()):
        if first != DEFAULT_REGISTRY and first not in _HUB_ALIASES:
            return name
        name = rest
    if "/" not in name:
        name = f"library/{name}"
    return f"{DEFAULT_REGISTRY}/{name}"


def qualified_oci_name(ref: ImageRef) -> str | None:
    """`oci_name`, with the registry spelled out (see `qualified`)."""
    name = oci_name(ref)
    return None if name is None else qualified(name)


def for_apptainer(ref: ImageRef) -> str:
    """Apptainer: OCI names become docker:// URIs of the qualified name; URIs and files stay."""
    name = qualified_oci_name(ref)
    if ref.form in ("oci", "shifter", "docker-uri") and name is not None:
        return f"docker://{name}"
    return ref.text


def for_podman(ref: ImageRef) -> str | None:
    """Podman and podman-hpc take qualified OCI references; files and other URIs they cannot
    run."""
    return qualified_oci_name(ref)


def for_shifter(ref: ImageRef) -> str | None:
    """Shifter: `docker:repo/img:tag`, Docker Hub names without the docker.io/library prefix."""
    name = qualified_oci_name(ref)
    if name is None:
        return None
    for prefix in ("docker.io/library/", "docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    last = name.rsplit("/", 1)[-1]
    if ":" not in last and "@" not in last:
        name += ":latest"
    return f"docker:{name}"
