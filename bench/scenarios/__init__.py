"""Every benchmark scenario, by the name `petrel bench` runs it by.

The top of `bench` but for its command (bench.__main__), which hands this table to the harness:
it imports the scenarios, and they import what a scenario is (bench.figures), the loads they
run and, some, another scenario's measurement; none imports this table or the harness.
"""

from bench.figures import Scenario
from bench.scenarios import (
    chaos,
    console,
    consumers,
    datapath,
    etl,
    gateway,
    internal_client,
    machine,
    memory,
    nemesis,
    peers,
    push,
    replication,
    sizing,
    storage,
    timers,
    transactions,
)

SCENARIOS: dict[str, Scenario] = {
    "chaos": chaos.chaos,
    "console": console.console,
    "consumers": consumers.consumers,
    "datapath": datapath.datapath,
    "etl": etl.etl,
    "gateway": gateway.gateway,
    "internal-client": internal_client.internal_client,
    "machine": machine.machine,
    "memory": memory.memory,
    "nemesis": nemesis.nemesis,
    "peers": peers.peers,
    "push": push.push,
    "replication": replication.replication,
    "sizing": sizing.sizing,
    "storage": storage.storage,
    "timers": timers.timers,
    "transactions": transactions.transactions,
}
