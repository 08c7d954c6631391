"""Messages: send (one, a batch; idempotent), pull by offset, find by id and by key."""
