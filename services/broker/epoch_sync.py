"""A broker's role for one run under a controller, and a returning slave's truncation to its new master's log.

`decide_role` reports in etcd at start and reads the state the controller keeps there
(services.broker.controller_link). A broker
named master records where its epoch begins (libs.store.epochs) before any write. A broker
that is to follow another asks that master for its epoch history first, truncates its own log
where the two histories part (what it wrote, or copied, that the new master never had: an old
master's unreplicated tail), and takes the master's history as its own. Without a
controller the role is the one the settings give.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import httpx

from libs.broker_api.replication import EPOCHS_PATH, BrokerRole, EpochHistory
from libs.etcd import EtcdClient, EtcdError, EtcdSettings
from libs.events.writer import EventWriter
from libs.http.client import internal_http
from libs.store.epochs import EpochFile, consistent_point
from libs.store.message_store import MessageStore
from libs.store.replica import truncate_log
from services.broker.controller_link import RETRY_SECONDS, ControllerLink, RunHandover
from services.broker.settings import BrokerSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RoleOfRun:
    role: BrokerRole
    master_address: str | None
    """A slave's master."""
    epochs: EpochFile
    link: ControllerLink | None = None


async def decide_role(
    settings: BrokerSettings,
    store: MessageStore,
    token: str | None,
    events: EventWriter,
    etcd: EtcdSettings,
    handover: RunHandover | None = None,
) -> RoleOfRun:
    epochs = await asyncio.to_thread(EpochFile(settings.store_dir).load)
    if not settings.controlled:
        return RoleOfRun(settings.role, settings.master_address, epochs)
    link = ControllerLink(
        EtcdClient(etcd),
        settings.broker_name,
        settings.broker_id,
        settings.address,
        store,
        epochs,
        heartbeat=settings.controller_heartbeat_ms / 1000,
        lease_ttl=settings.master_lease_seconds,
        margin=settings.master_lease_margin_ms / 1000,
        handover=handover,
    )
    try:
        return await _role_from_etcd(link, settings, store, epochs, token, events)
    except BaseException:
        await link.close()
        raise


async def _role_from_etcd(
    link: ControllerLink,
    settings: BrokerSettings,
    store: MessageStore,
    epochs: EpochFile,
    token: str | None,
    events: EventWriter,
) -> RoleOfRun:
    await link.start()
    while True:
        state, revision = await link.state_at_start()
        if state.master_id == settings.broker_id:
            try:
                taken = await link.take_master(state, revision)
            except EtcdError as exc:
                log.warning("etcd: master key not taken at epoch %d (%s); reading the state again", state.epoch, exc)
                taken = False
            if not taken:
                await asyncio.sleep(RETRY_SECONDS)
                continue
            link.take(state, revision)
            await asyncio.to_thread(epochs.begin, state.epoch, store.commitlog.write_offset)
            log.info("controller: master of %s at epoch %d", settings.broker_name, state.epoch)
            return RoleOfRun(settings.role, None, epochs, link)
        master = state.master_address
        if await _agree_with(master, store, epochs, token, events, settings.broker_name):
            link.take(state, revision)
            log.info("controller: slave of %s (%s) at epoch %d", settings.broker_name, master, state.epoch)
            return RoleOfRun(BrokerRole.SLAVE, master, epochs, link)
        await asyncio.sleep(RETRY_SECONDS)


async def _agree_with(
    master: str, store: MessageStore, epochs: EpochFile, token: str | None, events: EventWriter, broker: str
) -> bool:
    """Truncate this log to where it agrees with `master`'s and take its history; False: the master did not answer."""
    try:
        async with internal_http(master, token, 3.0) as client:
            answer = await client.get(EPOCHS_PATH)
            answer.raise_for_status()
    except httpx.HTTPError as exc:
        log.warning("the master %s did not give its epoch history (%s); reading the state again", master, exc)
        return False
    theirs = EpochHistory.model_validate_json(answer.content)
    end = store.commitlog.write_offset
    point = consistent_point(epochs.entries, end, [(e, s) for e, s in theirs.epochs], theirs.log_end)
    if point < end:
        dropped = await asyncio.to_thread(truncate_log, store, point)
        log.warning(
            "%s: truncated this log from %d to %d (%d bytes its new master %s never had)",
            broker,
            end,
            point,
            dropped,
            master,
        )
        events.emit("replica_truncated", broker=broker, master=master, from_offset=end, to_offset=point)
    await asyncio.to_thread(epochs.replace, [(e, s) for e, s in theirs.epochs])
    return True
