"""Consumer groups: admin, lag, offset resets, dead letters."""
