"""The gateway's `/v1/groups/{group}/subscriptions`: push subscriptions, served by the push service."""
