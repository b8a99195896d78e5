"""Every resource's probes, run in a background thread, each cut at its time-out; the last
results kept in memory, per replica.

A round starts every probe of every resource at once, each in a thread of its own (a hung
login node or filesystem holds only its own probe), waits at most `timeout` seconds, and
records each probe's outcome: ok with its words, or failed with the tool's own words, or
`no answer within N s`. A probe still running from an earlier round is not started again
but waited for once more (still running at the deadline, its check fails, saying how long it
has hung), so one hung command never piles up threads. Nothing here runs in a request:
requests read the last results (`snapshot`, `condition`).

A resource's condition, from its latest results: `down` when its scheduler or login probe
failed, else `unknown` while a probe has no result yet, else `degraded` when a file root
failed, else `up`. With probing off (interval 0) or not started, `condition` is None: the
gateway does not know more than the admin declares.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.resource_health.checks import Check, Kind, checks_of

Condition = Literal["up", "degraded", "down", "unknown"]


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one probe: ok or not, its words (the reason, when it failed), when it
    was started (epoch seconds) and how long it took (the time-out, when it gave no answer)."""

    kind: Kind
    ok: bool
    detail: str
    checked_at: float
    seconds: float


@dataclass
class _Attempt:
    check: Check
    started: float
    done: threading.Event
    result: CheckResult | None = None


class ResourceHealth:
    """The probes of every resource of `registry`, every `interval` seconds, each bounded by
    `timeout` (see the module's docstring)."""

    def __init__(
        self,
        registry: ProfileRegistry,
        backends: Backends,
        *,
        interval: float,
        timeout: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self._backends = backends
        self.interval = interval
        self.timeout = timeout
        self._clock = clock
        self._results: dict[str, dict[str, CheckResult]] = {}
        self._expected: dict[str, tuple[str, ...]] = {}
        self._running: dict[tuple[str, str], _Attempt] = {}
        self._since: dict[str, tuple[Condition, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def probing(self) -> bool:
        """True once started with a non-zero interval (until stopped)."""
        return self._thread is not None

    def start(self) -> None:
        """Start the background rounds (nothing when the interval is 0)."""
        if self.interval <= 0 or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="resource-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the rounds; probes still running end on their own (daemon threads)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.probe_round()
            self._stop.wait(self.interval)

    def probe_round(self) -> None:
        """One round: every probe started (or, still running from before, waited for again),
        each waited for at most `timeout` seconds."""
        attempts: list[tuple[str, _Attempt, bool]] = []
        for loaded in self._registry:
            try:
                checks = checks_of(loaded, self._backends)
            except Exception as error:  # a backend that cannot be built: the login is lost
                checks = [Check("login", "login", _failing(f"{type(error).__name__}: {error}"))]
            with self._lock:
                self._expected[loaded.id] = tuple(c.name for c in checks)
            for check in checks:
                key = (loaded.id, check.name)
                with self._lock:
                    attempt = self._running.get(key)
                    earlier = attempt is not None
                    if attempt is None:
                        attempt = self._running[key] = _Attempt(
                            check, self._clock(), threading.Event()
                        )
                attempts.append((loaded.id, attempt, earlier))
                if not earlier:
                    threading.Thread(
                        target=self._attempt,
                        args=(loaded.id, attempt),
                        name=f"probe {loaded.id} {check.name}",
                        daemon=True,
                    ).start()
        deadline = time.monotonic() + self.timeout
        outcomes: list[tuple[str, CheckResult, str]] = []
        for resource_id, attempt, earlier in attempts:
            finished = self._wait(attempt, deadline)
            result = attempt.result if finished else None
            if result is None:
                age = self._clock() - attempt.started
                detail = (
                    f"the probe started {age:.0f} s ago has not ended: it hangs"
                    if earlier
                    else f"no answer within {self.timeout:g} s"
                )
                result = CheckResult(attempt.check.kind, False, detail, attempt.started, age)
            outcomes.append((resource_id, result, attempt.check.name))
        with self._lock:
            for resource_id, result, name in outcomes:
                self._results.setdefault(resource_id, {})[name] = result
            now = self._clock()
            for resource_id, expected in self._expected.items():
                judged = _judge(self._results.get(resource_id, {}), expected)
                if self._since.get(resource_id, (None, 0.0))[0] != judged:
                    self._since[resource_id] = (judged, now)

    def _wait(self, attempt: _Attempt, deadline: float) -> bool:
        """Whether `attempt` ended by `deadline`; a stop ends the wait at once (a stopping
        replica must not wait out a hung probe)."""
        while not attempt.done.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self._stop.is_set():
                return False
            attempt.done.wait(min(left, 0.1))
        return True

    def _attempt(self, resource_id: str, attempt: _Attempt) -> None:
        began = time.monotonic()
        try:
            words = attempt.check.run(self.timeout)
            ok, detail = True, words
        except Exception as error:
            ok, detail = False, " ".join(str(error).split()) or type(error).__name__
        attempt.result = CheckResult(
            attempt.check.kind, ok, detail[:500], attempt.started, time.monotonic() - began
        )
        attempt.done.set()
        with self._lock:
            if self._running.get((resource_id, attempt.check.name)) is attempt:
                del self._running[(resource_id, attempt.check.name)]

    def snapshot(self) -> Mapping[str, Mapping[str, CheckResult]]:
        """The latest result of each probe, by resource id and probe name (`scheduler`,
        `login`, `file root <template>`): read-only, a copy taken under the lock, for the
        status views, `/ready` and metrics (one gauge per resource and probe: `ok`,
        `seconds`, the age of `checked_at`). Empty until the first round ends."""
        with self._lock:
            return MappingProxyType(
                {rid: MappingProxyType(dict(checks)) for rid, checks in self._results.items()}
            )

    def condition(self, resource_id: str) -> Condition | None:
        """`up`, `degraded`, `down` or `unknown` from the latest results (see the module's
        docstring); None when the gateway does not probe (interval 0, or not started)."""
        if not self.probing:
            return None
        with self._lock:
            return _judge(self._results.get(resource_id, {}), self._expected.get(resource_id, ()))

    def since(self, resource_id: str) -> float | None:
        """When the resource's condition last changed (epoch seconds; the end of the round
        that changed it), or None before its first round."""
        with self._lock:
            found = self._since.get(resource_id)
        return None if found is None else found[1]


def _judge(results: Mapping[str, CheckResult], expected: tuple[str, ...]) -> Condition:
    if any(not r.ok and r.kind != "file_root" for r in results.values()):
        return "down"
    if not expected or any(name not in results for name in expected):
        return "unknown"
    if any(not results[name].ok for name in expected):
        return "degraded"
    return "up"


def _failing(words: str) -> Callable[[float], str]:
    def probe(timeout: float) -> str:
        raise RuntimeError(words)

    return probe
