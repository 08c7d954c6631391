"""The chaos run's load: producers (single, batch, delayed, transactional sends) and consumers in two groups.

Each producer draws its operations from a Random seeded by the run's seed. A body
reads `<kind> <fate> <commit|rollback> <nonce>`: consumers act on the fate
(`Fate`), the check-back receiver answers the transaction's outcome from it. A
send is recorded in the Ledger only when it was answered 2xx; a transaction is
ended by its producer (commit or rollback) or left to the check-back.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

from bench.chaos.ledger import Delivery, Fate, Ledger, Outcome, Sent
from bench.chaos.patient import PatientClient

TOPIC = "chaos"
GROUP_A, GROUP_B = "chaos-a", "chaos-b"
PRODUCER_GROUP = "chaos-producers"
KINDS = {"single": 30, "batch": 12, "delayed": 18, "tx-commit": 14, "tx-rollback": 8, "tx-checkback": 18}
FATES = {Fate.OK: 80, Fate.FLAKY: 10, Fate.POISON: 10}
SEND_GIVE_UP_S = 20.0
RECEIVE_MAX = 16


@dataclass(frozen=True, slots=True)
class LoadShape:
    producers: int = 3
    consumers_per_group: int = 2
    lease_s: int = 6
    pause_s: float = 0.03
    """a producer's longest pause between operations"""


def body_of(kind: str, fate: Fate, rollback: bool) -> str:
    return f"{kind} {fate} {'rollback' if rollback else 'commit'} {uuid.uuid4().hex}"


def fate_of(body: str) -> Fate:
    parts = body.split()
    return Fate(parts[1]) if len(parts) > 1 and parts[1] in Fate.__members__.values() else Fate.OK


class Producer:
    def __init__(self, api: PatientClient, ledger: Ledger, rng: random.Random, shape: LoadShape) -> None:
        self.api, self.ledger, self.rng, self.shape = api, ledger, rng, shape

    async def run(self, stop: asyncio.Event) -> None:
        kinds, weights = list(KINDS), list(KINDS.values())
        while not stop.is_set():
            kind = self.rng.choices(kinds, weights)[0]
            if kind == "batch":
                await self._batch()
            elif kind.startswith("tx-"):
                await self._transaction(kind)
            else:
                await self._single(kind)
            if kind != "batch":
                self.ledger.attempts[kind] += 1
            await asyncio.sleep(self.rng.uniform(0, self.shape.pause_s))

    def _fate(self) -> Fate:
        return self.rng.choices(list(FATES), list(FATES.values()))[0]

    def _message(self, kind: str) -> tuple[Fate, dict[str, Any]]:
        fate = self._fate()
        message: dict[str, Any] = {"body": body_of(kind, fate, False), "tag": fate.value}
        if kind == "delayed":
            if self.rng.random() < 0.3:
                message["delay_level"] = 1
            else:
                message["delay_ms"] = self.rng.randint(300, 3000)
        return fate, message

    async def _single(self, kind: str) -> None:
        fate, message = self._message(kind)
        started = time.time()
        answer = await self.api.call(
            "send",
            "POST",
            f"/v1/topics/{TOPIC}/messages",
            json=message,
            headers={"Idempotency-Key": uuid.uuid4().hex},
            give_up_s=SEND_GIVE_UP_S,
        )
        if answer is not None and answer.is_success:
            self.ledger.answered(Sent(answer.json()["message_id"], kind, fate, started, time.time()))

    async def _batch(self) -> None:
        drawn = [self._message("batch") for _ in range(self.rng.randint(2, 6))]
        self.ledger.attempts["batch"] += len(drawn)
        started = time.time()
        answer = await self.api.call(
            "send batch",
            "POST",
            f"/v1/topics/{TOPIC}/messages:batch",
            json={"messages": [m for _, m in drawn]},
            headers={"Idempotency-Key": uuid.uuid4().hex},
            give_up_s=SEND_GIVE_UP_S,
        )
        if answer is None or not answer.is_success:
            return
        for entry in answer.json()["results"]:
            if entry.get("result"):
                fate = drawn[entry["index"]][0]
                self.ledger.answered(Sent(entry["result"]["message_id"], "batch", fate, started, time.time()))
            else:
                self.api.last_errors["send batch entry"] = str(entry.get("error"))

    async def _transaction(self, kind: str) -> None:
        rollback = kind == "tx-rollback" or (kind == "tx-checkback" and self.rng.random() < 0.4)
        fate = self._fate()
        started = time.time()
        begun = await self.api.call(
            "transaction begin",
            "POST",
            f"/v1/topics/{TOPIC}/transactions",
            json={"body": body_of(kind, fate, rollback), "producer_group": PRODUCER_GROUP},
            give_up_s=SEND_GIVE_UP_S,
        )
        if begun is None or not begun.is_success:
            return
        found = begun.json()
        sent = Sent(found["message_id"], kind, fate, started, time.time(), found["transaction_id"], rollback)
        self.ledger.answered(sent)
        if kind == "tx-checkback":
            return
        verb = "rollback" if rollback else "commit"
        # unanswered: the check-back ends it the same way (the receiver reads the outcome in the body)
        await self.api.call(
            f"transaction {verb}", "POST", f"/v1/transactions/{sent.transaction_id}/{verb}", give_up_s=SEND_GIVE_UP_S
        )


class Consumer:
    """Receives from the topic for one group; acks or nacks each message by its fate."""

    def __init__(self, api: PatientClient, ledger: Ledger, group: str, shape: LoadShape) -> None:
        self.api, self.ledger, self.group, self.shape = api, ledger, group, shape

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            answer = await self.api.call(
                f"receive {self.group}",
                "POST",
                f"/v1/groups/{self.group}/topics/{TOPIC}/receive",
                json={"max_messages": RECEIVE_MAX, "wait_seconds": 1, "invisible_seconds": self.shape.lease_s},
                give_up_s=0,
            )
            if answer is None or not answer.is_success:
                await asyncio.sleep(0.1)
                continue
            acks: dict[str, Delivery] = {}
            nacks: dict[str, Delivery] = {}
            for m in answer.json()["messages"]:
                delivery = Delivery(
                    self.group, m["message_id"], m["delivery_attempt"], time.time(), m["invisible_until"] / 1000
                )
                self.ledger.delivered(delivery)
                failing = self._fails(fate_of(m.get("body") or ""), delivery.attempt)
                (nacks if failing else acks)[m["receipt_handle"]] = delivery
            await self._settle("ack", acks, {})
            await self._settle("nack", nacks, {"reason": f"chaos: {self.group} refuses it"})

    def _fails(self, fate: Fate, attempt: int) -> bool:
        if self.group == GROUP_A:
            return fate == Fate.FLAKY and attempt == 1
        return fate == Fate.POISON

    async def _settle(self, verb: str, deliveries: dict[str, Delivery], extra: dict[str, Any]) -> None:
        if not deliveries:
            return
        answer, tries = await self.api.call_counted(
            f"{verb} {self.group}",
            "POST",
            f"/v1/groups/{self.group}/{verb}",
            json={"receipt_handles": list(deliveries)} | extra,
            give_up_s=self.shape.lease_s,
        )
        done = Outcome.ACKED if verb == "ack" else Outcome.NACKED
        if answer is None or not answer.is_success:
            for delivery in deliveries.values():
                delivery.outcome = Outcome.UNKNOWN
                delivery.detail = f"{verb}: {answer.status_code if answer is not None else 'no answer'}"
            return
        for result in answer.json()["results"]:
            delivery = deliveries[result["receipt_handle"]]
            if result["ok"]:
                delivery.outcome = done
                continue
            problem = (result.get("error") or {}).get("type", "?")
            # refused on a repeat: an earlier try may have taken effect, its answer lost with the gateway
            delivery.outcome = Outcome.UNKNOWN if tries > 1 else Outcome.REFUSED
            delivery.detail = f"{verb}: {problem}" + (f" on try {tries}" if tries > 1 else "")
