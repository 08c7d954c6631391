"""API keys and their permissions (the gateway checks them; `petrel keys` and `/v1/keys` manage them)."""
