"""Integration tests against the real test cluster that `scripts/cluster` starts."""
