"""The gateway's `/v1` routers, one module per resource."""
