"""What a `#PBS` line can carry: PBS directives have no quoting the gateway can rely on, so
blanks, quotes, '\\' and '#' are refused; `directory` is no directive under PBS (the script
enters it with a quoted `cd`)."""

from __future__ import annotations

from iri_gateway.schedulers.directive_rules import CONTROL_REASON, DirectiveRules
from iri_gateway.shell import has_control_characters, pbs_directive_safe

UNSAFE_REASON = "PBS directives cannot carry blanks, quotes, '\\' or '#'"
HOST_REASON = "PBS reads 'host:path' here; ':' is not allowed"


class PbsDirectiveRules(DirectiveRules):
    """Controls end the line; blanks, quotes, '\\', '#' have no quoting; ':' names a host."""

    def refusal(self, path: str, value: str) -> str | None:
        if has_control_characters(value):
            return CONTROL_REASON
        if path != "directory" and not pbs_directive_safe(value):
            return UNSAFE_REASON
        if path.endswith("_path") and ":" in value:
            return HOST_REASON
        return None


def gpu_request_refusal(word: str) -> str | None:
    """PBS asks for GPUs one way: `ngpus` in the select chunk."""
    if word != "ngpus":
        return f"gpu_request {word!r} is Slurm syntax; PBS uses 'ngpus'"
    return None
