"""A trailing newline is not a valid end of a name: every "whole value" pattern is anchored at
the very end (`\\Z`), since Python's `$` also matches just before a final newline.

Found by hypothesis (tests/shell_safety: the image name "0\\n" was accepted); the same anchor
stood in the checks of variable names, option names, runtime names and the words written bare
into scripts and directives, each a place where a newline ends a line of the batch script.
"""

from __future__ import annotations

import pytest

from iri_gateway import shell
from iri_gateway.models.images import ImageFormError, parse_image
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.runtimes.registry import RUNTIME_NAME
from tests.conftest import fields, problems_for


def test_a_variable_name_ending_in_a_newline_is_refused(registry: ProfileRegistry) -> None:
    document = {"executable": "/bin/true", "environment": {"NAME\n": "x"}}
    assert "environment.NAME\n" in fields(problems_for(registry, "local", document))


def test_an_image_name_ending_in_a_newline_is_refused() -> None:
    with pytest.raises(ImageFormError):
        parse_image("ubuntu\n")
    assert parse_image("ubuntu").text == "ubuntu"


def test_a_runtime_name_ending_in_a_newline_is_not_a_name() -> None:
    assert RUNTIME_NAME.match("podman") and not RUNTIME_NAME.match("podman\n")


def test_a_site_word_ending_in_a_newline_is_quoted() -> None:
    assert shell.quote_site("module") == "module"
    assert shell.quote_site("module\n") == '"module\n"'


def test_a_directive_value_ending_in_a_newline_is_refused() -> None:
    """Refused by the control-character check before the plain-word pattern is asked."""
    assert shell.slurm_directive_value("debug") == "debug"
    with pytest.raises(ValueError, match="control character"):
        shell.slurm_directive_value("debug\n")
