"""`profile check` for a profile sent as text (the console's Profiles page), not as a file.

The same loading (`ProfileRegistry.from_text`, which reports issues exactly as `profile check`
prints them: file:line: field: reason) and the same matrix (`check.run_matrix`, then
`check.check_scripts`: `bash -n` and shellcheck per rendered script) as the command line.
Nothing is kept: the text is parsed in memory, and the rendered scripts only pass through the
private temporary folder `check_scripts` makes and removes.

A text comes from a client, so its cost is bounded before anything is rendered: the matrix
has one cell per resource, runtime (and bare execution) and sample job, and a profile whose
matrix would pass `max_cells` is refused with the count, not rendered.
"""

from __future__ import annotations

from dataclasses import dataclass

from iri_gateway.errors import ProfileError, ProfileIssue
from iri_gateway.profiles.check import SAMPLES, CheckRow, check_scripts, run_matrix
from iri_gateway.profiles.loading import ProfileRegistry

MAX_CELLS = 200
"""Matrix cells a checked text may ask for: 50 resources with no runtime, 10 with four."""


@dataclass(frozen=True)
class TextCheck:
    """What came of checking one profile text: its matrix and how it was linted."""

    rows: list[CheckRow]
    resources: int
    shellcheck: bool

    @property
    def failed(self) -> int:
        return sum(row.outcome == "FAIL" for row in self.rows)

    @property
    def linted(self) -> str:
        """The same words `profile check` prints under its table."""
        return "bash -n and shellcheck -S warning" if self.shellcheck else "bash -n only"


def matrix_cells(registry: ProfileRegistry) -> int:
    """How many cells `run_matrix` would render for `registry`."""
    return sum(
        (len(loaded.resource.runtimes.available()) + 1) * len(SAMPLES) for loaded in registry
    )


def check_text(
    text: str, label: str, shellcheck: str | None, max_cells: int = MAX_CELLS
) -> TextCheck:
    """Load `text` as the profile `label` and run the check matrix on it.

    ProfileError when it does not load, or when its matrix would pass `max_cells` (then
    nothing is rendered). `shellcheck` is the program to lint with; None lints with
    `bash -n` only, which the result says.
    """
    registry = ProfileRegistry.from_text(text, label)
    cells = matrix_cells(registry)
    if cells > max_cells:
        raise ProfileError(
            [
                ProfileIssue(
                    label,
                    None,
                    "resources",
                    f"its check matrix has {cells} cells ({len(registry)} resources x their "
                    f"runtimes and bare execution x {len(SAMPLES)} sample jobs), more than the "
                    f"{max_cells} checked here: split the profile, or run "
                    "`iri-gateway profile check FILE`",
                )
            ]
        )
    rows = run_matrix(registry)
    check_scripts(rows, shellcheck)
    return TextCheck(rows, len(registry), shellcheck is not None)
