"""The port proxy's rules below HTTP: whose ports, where they are, links, sessions, limits."""
