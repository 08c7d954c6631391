"""Transactional messages: producer groups, half messages, commit and rollback."""
