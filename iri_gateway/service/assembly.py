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
from iri_gateway.service.proxy.service import ProxySettings
from iri_gateway.service.resource_health.monitor import ResourceHealth
from iri_gateway.service.webhooks.destinations import DestinationPolicy
from iri_gateway.service.webhooks.service import WebhookSettings

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
                for path in loaded.resource.connection.ssh.gateway_files()
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
        webhooks=webhook_settings(settings),
        proxy=proxy_settings(settings),
        webhook_policy=DestinationPolicy(
            allowed_networks=settings.webhook_allowed_networks,
            http_hosts=settings.webhook_http_hosts,
            resolve_timeout=settings.webhook_timeout,
        ),
    )


def proxy_settings(settings: Settings) -> ProxySettings:
    """The `proxy_*` settings, as the port proxy takes them."""
    return ProxySettings(
        url=settings.proxy_url,
        link_ttl=settings.proxy_link_ttl,
        session_ttl=settings.proxy_session_ttl,
        connections_per_user=settings.proxy_connections_per_user,
        bytes_per_second=settings.proxy_bytes_per_second,
        connect_timeout=settings.proxy_connect_timeout,
    )


def webhook_settings(settings: Settings) -> WebhookSettings:
    """The `webhook_*` settings, as the webhooks service takes them."""
    return WebhookSettings(
        per_user=settings.webhook_subscriptions_per_user,
        timeout=settings.webhook_timeout,
        retry_first=settings.webhook_retry_first,
        retry_longest=settings.webhook_retry_longest,
        max_age=settings.webhook_max_age,
        workers=settings.webhook_workers,
        claim_time=settings.webhook_claim_time,
        retention=settings.webhook_retention,
        poll_interval=settings.webhook_poll_interval,
    )
