"""The controller's contract: each broker name's master, epoch and in-sync set, kept in etcd.

Every key is under the cluster's `PETREL_ETCD_PREFIX` (libs.etcd adds it):

- `controller/leader`: the election among the nameservers that run a controller
  (`PETREL_NAMESERVER_CONTROLLER=true`); its value is the leader's address, on the leader's
  lease. Only the leader elects, and each of its transactions holds only while it leads.
- `brokers/{name}/state`: the broker name's `ReplicationState` (JSON): the epoch, the master's
  id, address and run, the in-sync set and its version. Every change is a transaction
  conditioned on the mod_revision it read. The controller leader writes it at each grant of
  mastership (a new epoch, every time); the master writes it when its in-sync set changes.
- `brokers/{name}/replicas/{id}`: each broker's `ReplicaReport` (where its log ends, the last
  epoch it holds data of, its run), on the broker's own lease: present while that run lives.
- `brokers/{name}/master`: put by the master on its own lease once it takes the role (only if
  the state still names its run at its epoch and the key is absent): the master's right to
  write lives exactly as long as that lease.

Rules the controller keeps (services.nameserver.controller_rules): a first master is the
most caught-up live replica (highest epoch, then log end); a master is gone when its master
key is absent and no replica key carries its run; it is replaced by the most caught-up live
member of the in-sync set, never by a replica outside it; every epoch is past every epoch any
broker reports. Each epoch begins at an offset of the CommitLog, kept by the brokers
(libs.store.epochs): a broker that returns as a slave truncates what it wrote past the point
where its history and its new master's part (services.broker.epoch_sync).
"""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from libs.routing import check_address

VIEW_PATH = "/internal/controller"
LEADER_KEY = "controller/leader"
BROKERS_PREFIX = "brokers/"


def state_key(broker_name: str) -> str:
    return f"{BROKERS_PREFIX}{broker_name}/state"


def master_key(broker_name: str) -> str:
    return f"{BROKERS_PREFIX}{broker_name}/master"


def replica_key(broker_name: str, broker_id: int) -> str:
    return f"{BROKERS_PREFIX}{broker_name}/replicas/{broker_id}"


def replicas_prefix(broker_name: str) -> str:
    return f"{BROKERS_PREFIX}{broker_name}/replicas/"


def parse_key(key: str) -> tuple[str, str, int | None] | None:
    """A key under `brokers/` as (broker name, "state" | "master" | "replica", broker id of a replica); None: not one
    of ours."""
    if not key.startswith(BROKERS_PREFIX):
        return None
    parts = key[len(BROKERS_PREFIX) :].split("/")
    if len(parts) == 2 and parts[1] in {"state", "master"}:
        return parts[0], parts[1], None
    if len(parts) == 3 and parts[1] == "replicas" and parts[2].isdigit():
        return parts[0], "replica", int(parts[2])
    return None


class ReplicaReport(BaseModel):
    """A broker's word about itself, on its lease: present while this run of it lives."""

    address: str
    log_end: int = Field(ge=0, description="where its CommitLog ends")
    epoch: int = Field(ge=0, description="the last epoch it holds data of (0: none)")
    run: str = Field(min_length=1, description="random per start of the broker's app")

    _address = field_validator("address")(check_address)


class ReplicationState(BaseModel):
    """A broker name's replication as decided: the value of `brokers/{name}/state`."""

    epoch: int = Field(ge=1, description="a new one at every grant of mastership")
    master_id: int = Field(ge=0)
    master_address: str
    master_run: str = Field(description="the run of the master broker the grant is for: another run is not master")
    in_sync: list[int] = Field(description="the broker ids that hold every acknowledged write (the master's too)")
    version: int = Field(ge=1, description="bumped at every change of the state, in-sync changes included")


class MasterClaim(BaseModel):
    """The value of `brokers/{name}/master`: which run took the role at which epoch."""

    broker_id: int
    run: str
    epoch: int


class ReportedBroker(BaseModel):
    broker_id: int
    address: str
    log_end: int
    epoch: int
    run: str


class BrokerNameState(BaseModel):
    broker_name: str
    assignment: ReplicationState | None = Field(description="None: no master granted yet")
    master_alive: bool = Field(description="the master's key is present (its lease lives)")
    brokers: list[ReportedBroker] = Field(description="the live replicas (their lease lives)")


class ControllerView(BaseModel):
    leader: str | None = Field(description="the address of the nameserver whose controller leads; None: none now")
    broker_names: list[BrokerNameState]
