"""The push service as its clients (the gateway) see it: schemas and client of its internal API.

The push service owns the subscriptions (stored in the shared metadata database)
and their live state; the gateway's `/v1/groups/{group}/subscriptions` routes call
it through `PushClient`. Nobody imports `services.push`.
"""
