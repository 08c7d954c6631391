"""What the controller decides for one broker name from what etcd holds of it: RocketMQ's controller logic, pure.

- No state yet: the first master is the most caught-up live replica (highest epoch, then log
  end; the lowest id on a tie), not broker id 0. A fresh name (every live replica at epoch 0
  with an empty log) begins at once with its lowest id; otherwise the controller waits
  `master_timeout` from when its leader first saw the name, so that a replica restarting a
  little later is not truncated to a shorter one.
- A state whose epoch is below an epoch a live replica reports is stale (a restored etcd
  snapshot, an imported old file): elected again, from every live replica.
- A master is gone when its master key is absent and no replica key carries its run (a grant
  its run has not taken yet is pending, not dead). Then the most caught-up live member of the
  in-sync set is granted; none alive: nobody is (no unclean election: a replica outside the
  set may lack acknowledged writes).
- Every grant is a new epoch, past the state's and past every epoch any live replica reports;
  the new master's in-sync set is the old set's live members and itself (Kafka keeps the ISR
  on election).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from libs.controller_api import MasterClaim, ReplicaReport, ReplicationState


@dataclass(slots=True)
class BrokerNameSeen:
    """One broker name's keys as one read of etcd gave them (revisions for the transactions conditioned on them)."""

    name: str
    state: ReplicationState | None = None
    state_revision: int = 0
    """the state's mod_revision (0: no state)"""
    master: MasterClaim | None = None
    replicas: dict[int, ReplicaReport] = field(default_factory=dict)
    replica_revisions: dict[int, int] = field(default_factory=dict)

    @property
    def master_alive(self) -> bool:
        state = self.state
        if self.master is not None:
            return True
        return state is not None and any(r.run == state.master_run for r in self.replicas.values())


@dataclass(frozen=True, slots=True)
class Grant:
    """Mastership granted to `state.master_id` at `state.epoch`."""

    state: ReplicationState
    why: str
    previous_master_id: int | None
    log_end: int


@dataclass(frozen=True, slots=True)
class Waiting:
    why: str


Decision = Grant | Waiting | None
"""None: nothing to do (a live master, or no replica at all)."""


def decide(seen: BrokerNameSeen, *, waited: float, master_timeout: float) -> Decision:
    """`waited`: seconds since this controller leader first saw the name (its monotonic clock)."""
    live = seen.replicas
    state = seen.state
    if not live:
        return None
    if state is None:
        return _first_master(seen, waited, master_timeout)
    return _failover(seen, state)


def _first_master(seen: BrokerNameSeen, waited: float, master_timeout: float) -> Decision:
    live = seen.replicas
    if all(r.epoch == 0 and r.log_end == 0 for r in live.values()):
        return _grant(seen, min(live), [], "the first master of a new broker name")
    if waited < master_timeout:
        return Waiting(
            f"no state yet: waiting {master_timeout - waited:.1f} s more for replicas that hold data to report"
        )
    return _grant(seen, most_caught_up(live), [], "the first master: the most caught-up live replica")


def _failover(seen: BrokerNameSeen, state: ReplicationState) -> Decision:
    live = seen.replicas
    if seen.master is not None:
        return None  # its lease lives: nobody else may be granted, whatever else holds
    stale = max(r.epoch for r in live.values()) > state.epoch
    if stale:
        return _grant(
            seen, most_caught_up(live), [], f"the state's epoch {state.epoch} is below an epoch a replica holds"
        )
    if seen.master_alive:
        return None  # granted, not taken yet: the run that was granted still lives
    candidates = {i: r for i, r in live.items() if i in state.in_sync}
    if not candidates:
        return Waiting(
            f"master {state.master_id} is gone and no member of the in-sync set {state.in_sync} is alive: "
            "waiting for one (a replica outside the set may lack acknowledged writes)"
        )
    kept = [i for i in state.in_sync if i in live]
    return _grant(seen, most_caught_up(candidates), kept, f"master {state.master_id} (run {state.master_run}) is gone")


def most_caught_up(replicas: dict[int, ReplicaReport]) -> int:
    return max(replicas, key=lambda i: (replicas[i].epoch, replicas[i].log_end, -i))


def next_epoch(seen: BrokerNameSeen) -> int:
    """Past the state's epoch and every epoch a live replica holds data of: an epoch is never handed out twice."""
    held = [r.epoch for r in seen.replicas.values()]
    return max([seen.state.epoch if seen.state else 0, *held]) + 1


def _grant(seen: BrokerNameSeen, chosen: int, kept: list[int], why: str) -> Grant:
    replica = seen.replicas[chosen]
    state = seen.state
    return Grant(
        ReplicationState(
            epoch=next_epoch(seen),
            master_id=chosen,
            master_address=replica.address,
            master_run=replica.run,
            in_sync=sorted({*kept, chosen}),
            version=(state.version + 1) if state else 1,
        ),
        why,
        None if state is None else state.master_id,
        replica.log_end,
    )
