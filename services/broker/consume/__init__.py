"""Consumer groups on the broker: leases, acks, retries, dead letters (RocketMQ's POP model).

groups.py     GroupConfig, RetryPolicy and the GroupTable (configs and subscriptions, SQLAlchemy)
window.py     ConsumeWindow: one consumer's progress in one queue, with its leases
redelivery.py the retry and dead-letter copies of a failed message
pop.py        PopService: receive, ack, nack, visibility, lease expiry
dead_letters.py  DLQ peek and redrive
api.py        the internal HTTP API
"""
