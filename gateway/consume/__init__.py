"""Consuming: receive under a lease, ack, nack, change a lease's visibility."""
