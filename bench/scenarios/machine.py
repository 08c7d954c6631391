"""How fast this machine is this hour: the FastAPI no-op POST rate alone (the gateway scenario's reference).

The machine's speed drifts by up to 4x between days (other tenants of the host), so a
suite time or a figure means little without it: `.ci/run` prints this beside the time
`make test` took, and a slow day is seen as one. The figure has no reference and no
target; it is the reference the other scenarios divide by.
"""

from __future__ import annotations

from bench.figures import BenchOptions, Figure
from bench.scenarios.gateway import FULL, QUICK, noop_sends

NAME = "machine: FastAPI no-op POST, typed body, 32 conns"


def machine(options: BenchOptions) -> list[Figure]:
    rate = noop_sends(QUICK if options.quick else FULL)
    return [Figure(NAME, rate, "none: the machine's own speed this hour", 0.0, "msg/s")]
