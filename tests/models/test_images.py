"""Image references: recognising forms and translating them for each runtime."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iri_gateway.models import images
from iri_gateway.models.images import ImageFormError, parse_image


@pytest.mark.parametrize(
    ("text", "form"),
    [
        ("ubuntu", "oci"),
        ("ubuntu:22.04", "oci"),
        ("docker.io/library/ubuntu:22.04", "oci"),
        ("localhost:5000/team/app:v1.2-rc1", "oci"),
        ("ghcr.io/org/app@sha256:" + "a" * 64, "oci"),
        ("docker://ubuntu:22.04", "docker-uri"),
        ("oras://ghcr.io/org/app:1", "oras-uri"),
        ("library://user/col/app:1", "library-uri"),
        ("shub://user/app", "shub-uri"),
        ("docker:ubuntu:22.04", "shifter"),
        ("/images/app.sif", "sif"),
        ("/images/app.sqsh", "squashfs"),
        ("/images/app/", "sandbox"),
    ],
)
def test_forms(text: str, form: str) -> None:
    assert parse_image(text).form == form


@pytest.mark.parametrize(
    "text",
    [
        "Ubuntu:22.04",
        "ubuntu latest",
        "ubuntu:$(id)",
        "/images/app.tar",
        "docker://Bad Name",
        "ubuntu;rm",
        "-rf",
        "app.sif",
    ],
)
def test_refused(text: str) -> None:
    with pytest.raises(ImageFormError):
        parse_image(text)


@given(st.text())
def test_oci_names_never_carry_shell_syntax(text: str) -> None:
    try:
        ref = parse_image(text)
    except ImageFormError:
        return
    if ref.form not in ("sif", "squashfs", "sandbox"):
        assert not set(text) & set(" \t\n'\"$`;&|<>()*?[]{}\\!#")


def test_translation() -> None:
    oci = parse_image("docker.io/library/ubuntu:22.04")
    assert images.for_apptainer(oci) == "docker://docker.io/library/ubuntu:22.04"
    assert images.for_podman(oci) == "docker.io/library/ubuntu:22.04"
    assert images.for_shifter(oci) == "docker:ubuntu:22.04"
    assert images.for_shifter(parse_image("nersc/app")) == "docker:nersc/app:latest"
    assert images.for_shifter(parse_image("docker.io/nersc/app:1")) == "docker:nersc/app:1"
    assert images.for_shifter(parse_image("registry.nersc.gov/a/b:2")) == (
        "docker:registry.nersc.gov/a/b:2"
    )
    assert images.for_podman(parse_image("docker:ubuntu:22.04")) == (
        "docker.io/library/ubuntu:22.04"
    )
    assert images.for_podman(parse_image("/x.sif")) is None
    assert images.for_apptainer(parse_image("/x.sif")) == "/x.sif"
    assert images.for_apptainer(parse_image("docker:ubuntu:1")) == (
        "docker://docker.io/library/ubuntu:1"
    )


@pytest.mark.parametrize(
    ("short", "podman", "apptainer", "shifter"),
    [
        (
            "jhnnsrs/segmentor:0.4.3-cpu",
            "docker.io/jhnnsrs/segmentor:0.4.3-cpu",
            "docker://docker.io/jhnnsrs/segmentor:0.4.3-cpu",
            "docker:jhnnsrs/segmentor:0.4.3-cpu",
        ),
        (
            "ubuntu:22.04",
            "docker.io/library/ubuntu:22.04",
            "docker://docker.io/library/ubuntu:22.04",
            "docker:ubuntu:22.04",
        ),
        (
            "docker.io/ubuntu",
            "docker.io/library/ubuntu",
            "docker://docker.io/library/ubuntu",
            "docker:ubuntu:latest",
        ),
        (
            "index.docker.io/lab/app:1",
            "docker.io/lab/app:1",
            "docker://docker.io/lab/app:1",
            "docker:lab/app:1",
        ),
        (
            "docker://lab/app:1",
            "docker.io/lab/app:1",
            "docker://docker.io/lab/app:1",
            "docker:lab/app:1",
        ),
        (
            "localhost/iri-test/app:cpu",
            "localhost/iri-test/app:cpu",
            "docker://localhost/iri-test/app:cpu",
            "docker:localhost/iri-test/app:cpu",
        ),
        (
            "registry.nersc.gov:5000/a/b:2",
            "registry.nersc.gov:5000/a/b:2",
            "docker://registry.nersc.gov:5000/a/b:2",
            "docker:registry.nersc.gov:5000/a/b:2",
        ),
    ],
)
def test_short_names_mean_docker_hub_for_every_runtime(
    short: str, podman: str, apptainer: str, shifter: str
) -> None:
    """Podman refuses a short name without a search registry: every runtime gets the name
    Docker would read, with the registry spelled out (Shifter's own syntax leaves out Docker
    Hub, which is its default)."""
    ref = parse_image(short)
    assert images.for_podman(ref) == podman
    assert images.for_apptainer(ref) == apptainer
    assert images.for_shifter(ref) == shifter


@given(st.from_regex(r"[a-z0-9]{1,8}(/[a-z0-9]{1,8}){0,2}(:[a-z0-9.]{1,8})?", fullmatch=True))
def test_every_oci_name_is_qualified_once(name: str) -> None:
    qualified = images.qualified(name)
    registry = qualified.split("/", 1)[0]
    assert "." in registry or ":" in registry or registry == "localhost"
    assert images.qualified(qualified) == qualified
    assert qualified.endswith(name.removeprefix("docker.io/"))
