"""What an `#SBATCH` line can carry: sbatch's own quoting holds blanks, quotes and `$`
(see `iri_gateway.shell.slurm_directive_value`); what it cannot hold is refused here."""

from __future__ import annotations

from iri_gateway.schedulers.directive_rules import CONTROL_REASON, DirectiveRules
from iri_gateway.shell import has_control_characters

SEPARATOR_REASON = (
    "sbatch reads any directive line containing 'hetjob' or 'packjob' as the start of a new "
    "heterogeneous-job component"
)
BACKSLASH_REASON = (
    "Slurm drops every '\\' from an output path that holds one, so the file would land elsewhere"
)


def is_separator(value: str) -> bool:
    """True when sbatch would take a directive line holding `value` for a hetjob separator."""
    lowered = value.lower()
    return "hetjob" in lowered or "packjob" in lowered


class SlurmDirectiveRules(DirectiveRules):
    """Controls end the line; 'hetjob' starts a component; '\\' is lost from output paths."""

    def refusal(self, path: str, value: str) -> str | None:
        if has_control_characters(value):
            return CONTROL_REASON
        if is_separator(value):
            return SEPARATOR_REASON
        if path in ("stdout_path", "stderr_path") and "\\" in value:
            return BACKSLASH_REASON
        return None

    def container_option_refusal(self, value: str) -> str | None:
        """Shifter's image and volumes as `#SBATCH --image=`, `--volume=` lines."""
        return SEPARATOR_REASON if is_separator(value) else None


def gpu_request_refusal(word: str) -> str | None:
    """Slurm's GPU request forms are its options; 'ngpus' is PBS's."""
    if word == "ngpus":
        return "gpu_request 'ngpus' is PBS syntax; Slurm uses gpus-per-task, gpus-per-node or gres"
    return None
