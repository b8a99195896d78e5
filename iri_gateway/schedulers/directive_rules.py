"""What a batch system's directive lines can carry: the shell safety of JobSpec values that a
scheduler plug-in writes into `#SBATCH`, `#PBS` (or its own) lines.

A directive line is read twice: by the scheduler, with its own quoting, and by bash, for which
it is a comment that a newline ends. A value the scheduler would read differently than the
gateway meant, or that would end the comment and start a command, is refused before
anything is rendered (negotiation), naming the field and why.

`DirectiveRules` itself is the rule for a batch system whose quoting the gateway has not
studied: it lets through only letters, digits and `._/@+-`, which no directive parser reads
specially. A plug-in that knows its scheduler's quoting declares a subclass that allows more
(Slurm quotes blanks and `$`); it never inherits a silent pass.
"""

from __future__ import annotations

import re

from iri_gateway.shell import has_control_characters

CONTROL_REASON = "contains a newline or other control character"
_PLAIN = re.compile(r"[A-Za-z0-9._/@+-]+")
_PLAIN_CHARACTERS = "letters, digits and '._/@+-'"


class DirectiveRules:
    """Refusals of values bound for directive lines; the base refuses all but plain words."""

    def refusal(self, path: str, value: str) -> str | None:
        """Why the JobSpec value at `path` (e.g. 'attributes.queue_name') cannot be written
        into a directive line, or None when it can."""
        if has_control_characters(value):
            return CONTROL_REASON
        if _PLAIN.fullmatch(value) is None:
            return (
                f"this batch system's directives are only known to carry {_PLAIN_CHARACTERS} "
                "safely; the value holds other characters (or is empty)"
            )
        return None

    def container_option_refusal(self, value: str) -> str | None:
        """Why a runtime's option value (an image, a volume) cannot travel as a directive line
        (only asked of a scheduler that declares `container_directives`)."""
        return self.refusal("container", value)

    def output_path(self, directory: str | None, path: str) -> str:
        """An output path as the directive line carries it (here: as given; a scheduler that
        reads a relative one elsewhere than the job's directory writes it joined)."""
        return path


class NoDirectiveLines(DirectiveRules):
    """A scheduler that writes no directive lines (the local one): its values reach the
    script only through the shell's quoting, which carries anything but a control
    character (a newline would still end a comment line naming the job)."""

    def refusal(self, path: str, value: str) -> str | None:
        return CONTROL_REASON if has_control_characters(value) else None
