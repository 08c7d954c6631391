"""`petrel topics|groups|lag|peek|tail|trace|dlq|status`: the operator's commands, clients of the gateway's `/v1`."""
