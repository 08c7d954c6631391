"""Reading the controller's keys (libs.controller_api) from etcd: per broker name, and as `GET /internal/controller`.

Any nameserver with `PETREL_ETCD_ENDPOINTS` answers the view from etcd, naming the leader, whether
or not its own controller leads.
"""

from __future__ import annotations

import logging
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from libs.controller_api import (
    BROKERS_PREFIX,
    LEADER_KEY,
    BrokerNameState,
    ControllerView,
    MasterClaim,
    ReplicaReport,
    ReplicationState,
    ReportedBroker,
    parse_key,
)
from libs.etcd import EtcdClient, KeyValue
from services.nameserver.controller_rules import BrokerNameSeen

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


def _parsed(model: type[M], kv: KeyValue) -> M | None:
    try:
        return model.model_validate_json(kv.value)
    except ValidationError as exc:
        log.warning("controller: etcd key %r does not hold a %s (%s): ignored", kv.key, model.__name__, exc)
        return None


def broker_names(kvs: list[KeyValue]) -> dict[str, BrokerNameSeen]:
    """The keys under `brokers/`, by broker name."""
    names: dict[str, BrokerNameSeen] = {}
    for kv in kvs:
        parsed = parse_key(kv.key.decode(errors="replace"))
        if parsed is None:
            continue
        name, kind, broker_id = parsed
        seen = names.setdefault(name, BrokerNameSeen(name))
        if kind == "state":
            seen.state, seen.state_revision = _parsed(ReplicationState, kv), kv.mod_revision
        elif kind == "master":
            seen.master = _parsed(MasterClaim, kv)
        elif broker_id is not None and (report := _parsed(ReplicaReport, kv)) is not None:
            seen.replicas[broker_id], seen.replica_revisions[broker_id] = report, kv.mod_revision
    return names


async def read_broker_names(client: EtcdClient) -> tuple[dict[str, BrokerNameSeen], int]:
    """Every broker name's keys, and the revision they were read at (watch from the next one)."""
    result = await client.range(BROKERS_PREFIX, prefix=True)
    return broker_names(result.kvs), result.revision


async def read_view(client: EtcdClient) -> ControllerView:
    leader = await client.get(LEADER_KEY)
    names, _ = await read_broker_names(client)
    return ControllerView(
        leader=None if leader is None else leader.value.decode(errors="replace"),
        broker_names=[
            BrokerNameState(
                broker_name=name,
                assignment=seen.state,
                master_alive=seen.master is not None,
                brokers=[
                    ReportedBroker(broker_id=i, address=r.address, log_end=r.log_end, epoch=r.epoch, run=r.run)
                    for i, r in sorted(seen.replicas.items())
                ],
            )
            for name, seen in sorted(names.items())
        ],
    )
