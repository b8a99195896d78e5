"""The console's OpenID Connect sign-in: its routes and its session cookies."""
