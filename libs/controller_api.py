"""The controller's contract: who is the master of each broker name, at which epoch, with which in-sync set.

The controller runs in a nameserver (`PETREL_NAMESERVER_CONTROLLER=true`), as RocketMQ 5 can
embed it. Each broker of a broker name under it (`PETREL_BROKER_CONTROLLER_ADDRESS`) reports
itself every `heartbeat_ms` (`PUT /internal/controller/{broker_name}/{broker_id}`: its
address, where its CommitLog ends and the last epoch it holds data of) and is answered with
the broker name's `Assignment`: the master's id and address, the epoch, the in-sync set.

- A broker name's first master is its broker id 0 (or, if id 0 never reports, whichever
  reports after `master_timeout`). Each change of master bumps the epoch.
- A master that has not reported for `master_timeout` is replaced by the most caught-up
  live member of its in-sync set (the one whose log ends furthest). No member alive, no
  election: a master outside the in-sync set could lack acknowledged writes.
- A master changes its in-sync set through the controller (`PUT .../in-sync` with its
  epoch). It drops a slave there before it answers a write without it, so every member
  the controller may promote holds every acknowledged write; a stale epoch is refused
  (409 stale-epoch).
- A master holds a lease: it takes no write once `lease_ms` have passed since it sent the
  last report the controller answered. `lease_ms` < `master_timeout`: by the time the
  controller promotes another, the old master has stopped acknowledging.

Each epoch begins at an offset of the CommitLog, kept by the brokers (libs.store.epochs):
a broker that returns as a slave truncates what it wrote past the point where its history
and its new master's part (services.broker.epoch_sync).
"""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from libs.routing import check_address

REPORT_PATH = "/internal/controller/{broker_name}/{broker_id}"
IN_SYNC_PATH = "/internal/controller/{broker_name}/in-sync"
VIEW_PATH = "/internal/controller"


class BrokerReport(BaseModel):
    """A broker's word to the controller about itself."""

    address: str
    log_end: int = Field(ge=0, description="where its CommitLog ends")
    epoch: int = Field(ge=0, description="the last epoch it holds data of (0: none)")

    _address = field_validator("address")(check_address)


class Assignment(BaseModel):
    """A broker name's replication, as the controller decided it."""

    broker_name: str
    epoch: int = Field(description="bumped at every change of master; 0 before the first")
    master_id: int | None = Field(description="None: no master yet")
    master_address: str | None
    in_sync: list[int] = Field(description="the broker ids that hold every acknowledged write (the master's too)")


class InSyncChange(BaseModel):
    """A master's new in-sync set, valid only at its epoch."""

    master_id: int = Field(ge=0)
    epoch: int = Field(ge=1)
    in_sync: list[int]


class ReportedBroker(BaseModel):
    broker_id: int
    address: str
    log_end: int
    epoch: int
    heard_seconds_ago: float


class BrokerNameState(BaseModel):
    assignment: Assignment
    brokers: list[ReportedBroker]


class ControllerView(BaseModel):
    broker_names: list[BrokerNameState]
