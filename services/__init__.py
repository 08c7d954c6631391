"""Petrel's internal services, one package each, each with `create_app(settings)`."""
