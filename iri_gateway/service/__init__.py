"""The service behind the API: the engine (submit, track, cancel, reconcile), the job store,
the poller, the per-resource backends and their transports, file access, auth and settings.
Nothing here knows about HTTP."""
