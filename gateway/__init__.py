"""The gateway: Petrel's public `/v1` HTTP API."""
