"""Topics: create, update, list, describe, delete."""
