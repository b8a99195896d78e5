"""Each resource's health, probed in the background: scheduler, login node, file roots."""
