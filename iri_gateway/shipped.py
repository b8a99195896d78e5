"""Where the shipped facility profiles and templates are, installed or in a source checkout.

Facility admins look for `facility_profiles/` and `templates/` at the top of the repository,
so that is where they live in the source. A wheel cannot put top-level folders anywhere
importable, so the build copies them into the package as `iri_gateway/_shipped/<folder>`
(`[tool.hatch.build.targets.wheel.force-include]` in pyproject.toml).

One rule finds them, in this order, relative to the imported `iri_gateway` package:

1. `<package>/_shipped/<folder>`: an installed wheel (`pip install .`);
2. `<package>/../<folder>`: a source checkout, including an editable install (`pip install
   -e .`), whose package is the checkout's own folder.

Neither present is an installation error (ShippedDataError), never an empty list of profiles.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from iri_gateway.errors import ShippedDataError

ShippedFolder = Literal["facility_profiles", "templates"]

_PACKAGE = Path(__file__).resolve().parent


def shipped_dir(folder: ShippedFolder) -> Path:
    """The shipped `folder`, found by the rule of the module docstring."""
    candidates = (_PACKAGE / "_shipped" / folder, _PACKAGE.parent / folder)
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise ShippedDataError(folder, candidates)
