"""From a JobSpec to a batch script, pure and without I/O: negotiation against a resource,
placement over many, image references, and rendering through the templates."""
