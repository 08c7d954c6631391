"""The gateway's authentication (bearer API keys), authorization (per operation) and per-key rates."""
