"""The broker's contract: what a client of a broker's internal API needs, and nothing of the broker itself.

- `wire`: header names, content types, limits and property values both sides read.
- `schemas`: the JSON bodies of topics, puts, offsets and the timer's calls.
- `groups`: a consumer group's configuration (its one definition) and its wire bodies.
- `consume`: receive, ack, nack, visibility, lag, offsets and dead-letter bodies.
- `transactions`: ending transactions, and their state.
- `frames`: the binary answers (pulled records with their offsets, ConsumeQueue units, leases).
- `nameservers`: `NameserverClient`, with failover, and the listing of masters.
- `client`: `BrokerClient`, the one async client of a broker.

The broker (`services.broker`) imports these; its clients (the gateway, the timer,
txcheck) import these and never `services.broker` (import-linter checks it).
"""
