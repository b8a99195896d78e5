"""The OpenTelemetry SDK set up for one application: a tracer provider of its own that
batches its spans to the OTLP/HTTP endpoint of the settings, or nothing when it is unset.

Why a provider per application and never the API's global one: the global can be set once
per process, and a process that builds many applications (the tests) would trace them all
into the first one's exporter. Why each `serve --workers` worker exports on its own: each is
a fresh interpreter that builds its application, so its own provider and batch thread.

What the SDK reads from the standard `OTEL_*` variables, and what it does not: the
exporter's headers, time-out, compression and TLS files (`OTEL_EXPORTER_OTLP_TRACES_HEADERS`,
`..._TIMEOUT`, `..._COMPRESSION`, `..._CERTIFICATE`, or their `OTEL_EXPORTER_OTLP_*` forms),
the batching (`OTEL_BSP_*`), extra resource attributes (`OTEL_RESOURCE_ATTRIBUTES`) and the
SDK's kill switch (`OTEL_SDK_DISABLED=true`: no spans) are the SDK's; whether tracing is on,
the endpoint, the service name and the sampler are the gateway's settings only (an
`OTEL_EXPORTER_OTLP_ENDPOINT` alone turns nothing on).

The SDK is imported by `tracer_provider` only, so a gateway with tracing off never loads it.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from iri_gateway.service.operations.settings import Settings

INSTRUMENTATION_NAME = "iri_gateway"


def checked_endpoint(url: str) -> str:
    """URL when it can be an OTLP/HTTP endpoint (http or https, a host, a valid port); a
    ValueError saying what is wrong otherwise (the settings name the setting)."""
    example = "e.g. http://collector:4318/v1/traces"
    if "@" in url:  # said before anything echoes the URL: it may hold a password
        raise ValueError(
            "the URL may not carry credentials (give the collector's as "
            f"OTEL_EXPORTER_OTLP_TRACES_HEADERS); {example}"
        )
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError for a port that is not a number in range
    except ValueError as error:
        raise ValueError(f"{url!r} is not a URL ({error}); {example}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r} must start with http:// or https:// (OTLP over HTTP); {example}")
    if not parts.hostname:
        raise ValueError(f"{url!r} names no host; {example}")
    if port == 0:
        raise ValueError(f"{url!r} names port 0; {example}")
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r} may not carry a query or a fragment; {example}")
    return url


def tracer_provider(settings: Settings) -> TracerProvider | None:
    """A provider exporting to `settings.otlp_traces_endpoint`, or None when it is unset."""
    if settings.otlp_traces_endpoint is None:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import (
        SERVICE_INSTANCE_ID,
        SERVICE_NAME,
        SERVICE_VERSION,
        Resource,
    )
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    from iri_gateway import __version__

    provider = TracerProvider(
        resource=Resource.create(
            {
                SERVICE_NAME: settings.trace_service_name,
                SERVICE_VERSION: __version__,
                # Which process: each `serve --workers` worker exports its own spans.
                SERVICE_INSTANCE_ID: f"{socket.gethostname()}:{os.getpid()}",
            }
        ),
        sampler=ParentBased(TraceIdRatioBased(settings.trace_sample_ratio)),
        shutdown_on_exit=False,  # the application's lifespan shuts it down, flushing it
    )
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_traces_endpoint))
    )
    return provider
