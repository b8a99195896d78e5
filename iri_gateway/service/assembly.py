"""Building the engine from the settings: profiles, job store, replica, backends, submitter.

The one place where a configuration becomes collaborators, so that the API only makes the
HTTP application around an engine (`iri_gateway.api.app.create_app`), and the CLI, tests
and benchmarks can build the very same engine without HTTP. Profile errors are fatal here.
"""

from __future__ import annotations

import logging

from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.profiles.local_machine import registry_with_machine
from iri_gateway.profiles.local_runtimes import registry_for_this_machine
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.submitter import Submitter
from iri_gateway.service.operations.backends import Backends, gateway_files
from iri_gateway.service.operations.metrics import Metrics
from iri_gateway.service.operations.replicas import Replica
from iri_gateway.service.operations.settings import Settings
from iri_gateway.service.operations.store import JobStore
from iri_gateway.service.resource_health.monitor import ResourceHealth

logger = logging.getLogger(__name__)


def load_profiles(settings: Settings) -> ProfileRegistry:
    """The resources of the settings' profiles as this machine offers them (see
    `build_engine`); ProfileError when a profile is broken. `serve --workers N` calls it once
    before its workers start, so a broken profile fails the command once."""
    paths = settings.profiles or [builtin_profile("local")]
    registry, notes = registry_for_this_machine(ProfileRegistry.from_paths(paths))
    registry, measured = registry_with_machine(registry)
    notes += measured
    for note in notes:
        logger.warning("%s", note)
    return registry


def build_engine(settings: Settings, *, metrics: Metrics | None = None) -> Engine:
    """Profiles, store and backends as the settings say; profile errors are fatal here.

    Resources run by the local scheduler offer only the runtimes installed on this machine;
    those whose profile says `nodes: {detect: true}` take their hardware facts from it.
    `metrics` is where the backends, the submitter and the engine's parts count what they do
    (the application's, `operations.metrics`); None: nothing is measured.
    """
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    registry = load_profiles(settings)
    store = JobStore(settings.store_url, pool_size=settings.database_pool_size)
    try:
        replica = Replica(store, timeout=settings.replica_timeout)
    except BaseException:
        store.close()
        raise
    backends = Backends(
        settings.data_dir,
        gateway_files(
            store_url=settings.store_url,
            tokens=settings.tokens_path,
            ssh_files=[
                path
                for loaded in registry
                if loaded.resource.connection.ssh
                for path in (
                    loaded.resource.connection.ssh.known_hosts,
                    loaded.resource.connection.ssh.key_file,
                )
                if path
            ],
        ),
        settings.file_agent_limits(),
        metrics,
    )
    return Engine(
        registry=registry,
        store=store,
        backends=backends,
        submitter=Submitter(
            concurrency=settings.submit_concurrency,
            longest_pause=settings.submit_retry_longest,
            metrics=metrics,
        ),
        settle_time=settings.settle_time,
        replica=replica,
        task_workers=settings.task_workers,
        task_progress_interval=settings.task_progress_interval,
        task_running_per_user=settings.task_running_per_user,
        tasks_per_user=settings.tasks_per_user,
        resource_health=ResourceHealth(
            registry,
            backends,
            interval=settings.resource_health_interval,
            timeout=settings.resource_health_timeout,
        ),
        metrics=metrics,
        event_window=settings.events_window,
        event_retention=settings.event_retention * 3600,
    )
