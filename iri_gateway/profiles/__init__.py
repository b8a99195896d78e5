"""The facility admin's room: loading and checking profiles, app manifests of flavours, the
runtimes of this machine, and the capabilities document a resource's profile yields."""
