"""The nameserver: broker registry and topic routes, in memory, no disk."""
