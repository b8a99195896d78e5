"""Job states (IRI `JobState`) and what a scheduler reports about one job."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from iri_gateway.models.array_elements import ArrayElements


class JobState(StrEnum):
    """The IRI v2 job states (from PSI/J)."""

    NEW = "new"
    QUEUED = "queued"
    HELD = "held"
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def final(self) -> bool:
        return self in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELED)


@dataclass(frozen=True)
class NativeStatus:
    """One job as the scheduler sees it, mapped to an IRI state, with its own words kept.

    `state` is None when the scheduler reports a state this gateway does not know: the job
    keeps its previous IRI state and tracking goes on, with the native state in the message.
    """

    native_id: str
    state: JobState | None
    native_state: str
    exit_code: int | None = None
    reason: str | None = None
    elements: ArrayElements | None = None
    """An array's: what the scheduler said of its elements this time (those it no longer
    mentions keep what was known of them); the array's own state is derived from them."""
    elements_complete: bool = False
    """`elements` are every element the scheduler still holds: one it no longer lists has
    left its queue (see `tracking.array_change`)."""

    @property
    def message(self) -> str:
        """Human-readable: the scheduler's state, and its reason when it gave one."""
        text = self.native_state
        if self.reason and self.reason not in ("None", "(null)"):
            text += f" ({self.reason})"
        if self.exit_code is not None and self.state is not None and self.state.final:
            text += f", exit code {self.exit_code}"
        return text


@dataclass(frozen=True)
class JobNodes:
    """Where a running job is, as its scheduler says (never as the job itself says: a job
    could write any address, and the port proxy connects where this points).

    `batch_host` runs the job's script (and a job's program listening on its ports);
    `addresses` maps each node of the job to the address the gateway connects to (an IP
    address or a host name resolved where the connection is made)."""

    batch_host: str
    addresses: dict[str, str]
