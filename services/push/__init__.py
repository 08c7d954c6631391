"""The push service: webhook subscriptions, delivered signed, within caps, backing off an endpoint in trouble."""
