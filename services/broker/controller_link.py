"""ControllerLink: a broker under a controller (libs.controller_api) reports itself and learns its role.

At start the broker reports where its log ends and the last epoch it holds data of, and
is told who is its broker name's master: itself (it records the epoch's start and takes
writes), or another (it truncates what its new master does not share, then follows it:
services.broker.epoch_sync). The role holds for the whole run of the broker's app.

While running it reports every `heartbeat` seconds. A master holds a lease: it may
acknowledge writes only until `lease` seconds after it sent the last report the
controller answered naming it master at its epoch; past that it is fenced
(services.broker.replication_state.WriteFence). When an answer names another master or
another epoch than this run's, the broker restarts its app (`libs.http.stopping.
request_restart`) to take the new role: a new master's writes, or a slave's truncation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import httpx

from libs.controller_api import IN_SYNC_PATH, REPORT_PATH, Assignment, BrokerReport, InSyncChange
from libs.http.client import internal_http
from libs.http.paths import internal_path
from libs.store.epochs import EpochFile
from libs.store.message_store import MessageStore
from services.broker.in_sync import InSyncReplicas

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0


class ControllerLink:
    def __init__(
        self,
        controller: str,
        broker_name: str,
        broker_id: int,
        address: str,
        store: MessageStore,
        epochs: EpochFile,
        token: str | None,
        *,
        heartbeat: float,
        lease: float,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.broker_name = broker_name
        self.broker_id = broker_id
        self.address = address
        self.store = store
        self.epochs = epochs
        self.heartbeat = heartbeat
        self.lease = lease
        self.clock = clock
        self.client = internal_http(controller, token, httpx.Timeout(min(lease / 2, 3.0)), transport=transport)
        self.run_as: Assignment | None = None
        """The assignment this run of the broker took its role from."""
        self.last: Assignment | None = None
        self._lease_until = 0.0
        self._last_answered_sent = 0.0
        """When the report the controller last answered was sent: a lease runs from there, never from later."""

    @property
    def is_master(self) -> bool:
        return self.run_as is not None and self.run_as.master_id == self.broker_id

    def holds_lease(self) -> bool:
        return self.clock() < self._lease_until

    async def report(self) -> Assignment:
        sent = self.clock()
        body = BrokerReport(
            address=self.address, log_end=self.store.commitlog.write_offset, epoch=self.epochs.last_epoch
        )
        answer = await self.client.put(
            internal_path(REPORT_PATH, broker_name=self.broker_name, broker_id=self.broker_id), json=body.model_dump()
        )
        answer.raise_for_status()
        assignment = Assignment.model_validate_json(answer.content)
        self.last = assignment
        self._last_answered_sent = sent
        run_as = self.run_as
        if run_as is not None and assignment.master_id == self.broker_id and assignment.epoch == run_as.epoch:
            self._lease_until = sent + self.lease
        return assignment

    async def assignment_at_start(self) -> Assignment:
        """Report until the controller answers with a master (this broker or another): the role of this run."""
        while True:
            try:
                assignment = await self.report()
                if assignment.master_id is not None:
                    return assignment
                log.info("controller: %s has no master yet; asking again", self.broker_name)
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("controller %s did not answer (%r); asking again", self.client.base_url, exc)
            await asyncio.sleep(RETRY_SECONDS)

    def take(self, assignment: Assignment) -> None:
        """This run's role is the one `assignment` gives; a master's lease runs from when it sent the report that
        `assignment` answered."""
        self.run_as = assignment
        if self.is_master:
            self._lease_until = self._last_answered_sent + self.lease

    def role_changed(self, assignment: Assignment) -> str | None:
        """Why this run's role no longer holds under `assignment` (None: it holds)."""
        run_as = self.run_as
        if run_as is None or assignment.master_id is None:
            return None
        if assignment.epoch != run_as.epoch or assignment.master_id != run_as.master_id:
            return (
                f"{self.broker_name}'s master is now broker {assignment.master_id} ({assignment.master_address}) "
                f"at epoch {assignment.epoch}; this run was at epoch {run_as.epoch} with master {run_as.master_id}"
            )
        return None

    async def change_in_sync(self, kept: list[int]) -> bool:
        """A master's in-sync set without the slaves not in `kept`: whether the controller took it."""
        run_as = self.run_as
        if run_as is None or not self.is_master:
            return False
        change = InSyncChange(master_id=self.broker_id, epoch=run_as.epoch, in_sync=[self.broker_id, *kept])
        try:
            answer = await self.client.put(
                internal_path(IN_SYNC_PATH, broker_name=self.broker_name), json=change.model_dump()
            )
        except httpx.HTTPError as exc:
            log.warning("controller: the in-sync set %s was not taken (%s)", change.in_sync, exc)
            return False
        if answer.status_code != 200:
            log.warning("controller: the in-sync set %s was refused: %s", change.in_sync, answer.text[:300])
            return False
        self.last = Assignment.model_validate_json(answer.content)
        return True

    async def run(self, in_sync: InSyncReplicas | None, restart: Callable[[str], None]) -> None:
        """Report every `heartbeat` until cancelled; a master also tells the controller of slaves that joined,
        and drops those gone silent or behind for longer than the lag bound (services.broker.in_sync_rules)."""
        while True:
            await asyncio.sleep(self.heartbeat)
            try:
                assignment = await self.report()
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("controller %s did not answer (%r)", self.client.base_url, exc)
                continue
            why = self.role_changed(assignment)
            if why is not None:
                log.warning("controller: %s: restarting as the new role", why)
                self._lease_until = 0.0  # no write is acknowledged while the app stops
                restart(why)
                return
            if in_sync is not None and self.is_master:
                await in_sync.drop_lagging(self.store.commitlog.write_offset)
                ours = sorted({self.broker_id, *in_sync.in_sync()})
                if ours != assignment.in_sync:
                    await self.change_in_sync([i for i in ours if i != self.broker_id])

    async def close(self) -> None:
        await self.client.aclose()
