"""A day's stories told to a live cluster through the gateway's public API, then the nightly job: each is in the tables.

Group `billing` acks a plain send; nacks two poison messages until they are dead-lettered,
and an operator redrives one; receives a delayed message and the committed transactions.
One transaction is committed by its producer, one rolled back, and one left open is
committed by the producer's answer to txcheck's check-back. Once the services have
exported those events, the job runs on the real files and every story is found by the
message id the gateway answered. Figures that depend on timing (latencies, lateness) are
only checked to be there and sane; a run across midnight runs the job for both days.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType
from pyspark.testing import assertDataFrameEqual

from deploy import checkback_receiver
from libs import webhooks
from services.etl.delays import delay_daily_schema
from services.etl.job import run_daily
from services.etl.journey import message_journey_schema
from services.etl.quality import data_quality_schema
from services.etl.settings import EtlSettings
from services.etl.traffic import group_hourly_schema, topic_hourly_schema
from services.etl.transactions import transaction_daily_schema
from tests.support.cluster import LocalCluster, local_cluster_with_txcheck
from tests.support.exported_events import missing_events
from tests.support.serving import serving
from tests.support.waiting import eventually

# One cluster and one run of the job: about 30 s on an idle machine; the bound leaves room for a loaded one.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

GROUP = "billing"
MAX_RETRIES = 2
ATTEMPTS = MAX_RETRIES + 1
"""Deliveries of a message nacked every time: the first, then one per retry, then the DLQ."""
FAST_RETRIES = {"type": "exponential", "initial_ms": 100, "max_ms": 200}
DELAY_MS = 1000


@dataclass
class Story:
    """The message ids the gateway answered, and when the traffic began and ended (ms)."""

    plain: str = ""
    poison: str = ""
    redriven: str = ""
    delayed: str = ""
    committed: str = ""
    rolled_back: str = ""
    checked_back: str = ""
    began: int = 0
    ended: int = 0

    def days(self) -> list[date]:
        """The UTC days the traffic touched: one, unless the test ran across midnight."""
        first, last = (datetime.fromtimestamp(ms / 1000, UTC).date() for ms in (self.began, self.ended))
        return sorted({first, last})

    def events_needed(self) -> Counter[tuple[str, str]]:
        """(event, message_id) -> how many: every event the tables' figures below are computed from."""
        wanted = Counter(
            {
                ("sent", self.plain): 1,
                ("acked", self.plain): 1,
                ("redriven", self.redriven): 1,
                ("sent", self.delayed): 1,
                ("delay_scheduled", self.delayed): 1,
                ("delay_fired", self.delayed): 1,
                ("acked", self.delayed): 1,
                ("transaction_commit", self.committed): 1,
                ("acked", self.committed): 1,
                ("transaction_rollback", self.rolled_back): 1,
                ("transaction_check", self.checked_back): 1,
                ("transaction_commit", self.checked_back): 1,
                ("acked", self.checked_back): 1,
            }
        )
        wanted.update(("transaction_half", m) for m in (self.committed, self.rolled_back, self.checked_back))
        for poison in (self.poison, self.redriven):
            wanted.update({("sent", poison): 1, ("delivered", poison): ATTEMPTS, ("nacked", poison): ATTEMPTS})
            wanted.update({("retried", poison): MAX_RETRIES, ("dead_lettered", poison): 1})
        return wanted


async def send(client: httpx.AsyncClient, topic: str, body: str, **fields: Any) -> str:
    answer = await client.post(f"/v1/topics/{topic}/messages", json={"body": body} | fields)
    assert answer.status_code == 201, answer.text
    message_id: str = answer.json()["message_id"]
    return message_id


async def begin(client: httpx.AsyncClient, body: str, **fields: Any) -> tuple[str, str]:
    """A half message of producer group `shop` in topic `payments`: (transaction id, message id)."""
    answer = await client.post(
        "/v1/topics/payments/transactions", json={"body": body, "producer_group": "shop"} | fields
    )
    assert answer.status_code == 201, answer.text
    return answer.json()["transaction_id"], answer.json()["message_id"]


async def end(client: httpx.AsyncClient, transaction_id: str, verb: str) -> None:
    answer = await client.post(f"/v1/transactions/{transaction_id}/{verb}")
    assert answer.status_code == 200, answer.text


async def settle(client: httpx.AsyncClient, verb: str, handle: str, **fields: Any) -> None:
    answer = await client.post(f"/v1/groups/{GROUP}/{verb}", json={"receipt_handles": [handle]} | fields)
    assert answer.status_code == 200, answer.text
    assert answer.json()["results"][0]["ok"], answer.text


async def receive_one(client: httpx.AsyncClient, topic: str) -> dict[str, Any]:
    body = {"max_messages": 1, "wait_seconds": 5}
    answer = await client.post(f"/v1/groups/{GROUP}/topics/{topic}/receive", json=body)
    assert answer.status_code == 200, answer.text
    messages = answer.json()["messages"]
    assert len(messages) == 1, f"{GROUP} received {len(messages)} messages of {topic}, not one: {answer.text}"
    return dict(messages[0])


async def nack_until_dead(client: httpx.AsyncClient, message_id: str) -> None:
    for attempt in range(1, ATTEMPTS + 1):
        message = await receive_one(client, "orders")
        assert (message["message_id"], message["delivery_attempt"]) == (message_id, attempt)
        await settle(client, "nack", message["receipt_handle"], reason="cannot parse")


async def ack_all(client: httpx.AsyncClient, topic: str, message_ids: set[str], timeout: float) -> None:
    """Receive from `topic` and ack until every one of `message_ids` was acked once."""
    left = set(message_ids)

    async def acked_all() -> bool:
        answer = await client.post(f"/v1/groups/{GROUP}/topics/{topic}/receive", json={"wait_seconds": 1})
        for message in answer.json()["messages"]:
            await settle(client, "ack", message["receipt_handle"])
            left.discard(message["message_id"])
        return not left

    await eventually(acked_all, f"{GROUP} acked {sorted(message_ids)} of {topic}", timeout)


async def tell_stories(client: httpx.AsyncClient, checkback_url: str, secret: str) -> Story:
    story = Story(began=int(time.time() * 1000))
    group = {"max_retries": MAX_RETRIES, "retry_policy": FAST_RETRIES}
    assert (await client.put(f"/v1/groups/{GROUP}", json=group)).status_code == 201
    registration = {"checkback_url": checkback_url, "signing_secret": secret}
    assert (await client.put("/v1/producer-groups/shop", json=registration)).status_code == 201
    # The slow stories first: the check-back (about two seconds) and the delayed message run meanwhile.
    _, story.checked_back = await begin(client, "left open: the check-back commits it")
    story.delayed = await send(client, "later", "in a second", delay_ms=DELAY_MS)

    story.plain = await send(client, "orders", "order 1 paid")
    message = await receive_one(client, "orders")
    assert message["message_id"] == story.plain
    await settle(client, "ack", message["receipt_handle"])

    story.poison = await send(client, "orders", "poison")
    await nack_until_dead(client, story.poison)
    story.redriven = await send(client, "orders", "poison, fixed later")
    await nack_until_dead(client, story.redriven)
    dlq = (await client.get(f"/v1/groups/{GROUP}/dlq")).json()["messages"]
    assert sorted((d["message_id"], d["attempts"], "cannot parse" in d["reason"]) for d in dlq) == sorted(
        (m, ATTEMPTS, True) for m in (story.poison, story.redriven)
    )
    redrive = await client.post(f"/v1/groups/{GROUP}/dlq:redrive", json={"message_ids": [story.redriven]})
    assert redrive.json()["message_ids"] == [story.redriven], redrive.text

    committing, story.committed = await begin(client, "committed by its producer", check_immunity_seconds=60)
    rolling_back, story.rolled_back = await begin(client, "rolled back by its producer", check_immunity_seconds=60)
    await end(client, committing, "commit")
    await end(client, rolling_back, "rollback")

    # Bounds for a hang, not speed targets: under a 0.5-core quota the check-back took longer than 15 s.
    await ack_all(client, "later", {story.delayed}, timeout=60)
    await ack_all(client, "payments", {story.committed, story.checked_back}, timeout=60)
    story.ended = int(time.time() * 1000)
    return story


async def exported(cluster: LocalCluster, story: Story) -> None:
    """Wait until the services have written (they flush about every second) every event the figures need."""
    left: Counter[tuple[str, str]] = Counter()

    async def written() -> bool:
        left.clear()
        left.update(missing_events(cluster.data_dir, story.events_needed()))
        return not left

    await eventually(written, "the story's events exported", timeout=60, context=lambda: f"missing: {dict(left)}")


class Warehouse:
    """Every day's rows of a table the job wrote, read back with the table's own schema."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark, self.root = spark, root

    def table(self, name: str, schema: StructType) -> DataFrame:
        return self.spark.read.schema(schema).parquet(str(self.root / name))

    def frame(self, rows: list[tuple[Any, ...]], ddl: str) -> DataFrame:
        """Expected rows, to compare with a table's."""
        return self.spark.createDataFrame(rows, ddl)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def told(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Story, Warehouse]:
    """The stories told, their events exported, the cluster stopped and the job run on every day they touched."""
    tmp_path = tmp_path_factory.mktemp("live-story")
    data_dir = tmp_path / "data"
    secret = webhooks.new_secret()
    with serving(checkback_receiver.create_app(secret, "COMMIT")) as receiver:
        async with local_cluster_with_txcheck(data_dir) as (cluster, client):
            story = await tell_stories(client, f"{receiver.url}/checkback", secret)
            await exported(cluster, story)
    settings = EtlSettings(
        events_uri=(data_dir / "export" / "events").as_uri(),
        warehouse_uri=(tmp_path / "warehouse").as_uri(),
        lookback_days=1,
    )
    runs = [run_daily(spark, settings, day) for day in story.days()]
    assert [run.quarantined for run in runs] == [0] * len(runs), "a line a live service wrote was quarantined"
    return story, Warehouse(spark, tmp_path / "warehouse")


def sane(rows: list[Row], *columns: str) -> list[str]:
    """The complaints about `columns` of `rows`: each must be there (non-null) in some row and >= 0 in every one."""
    complaints = [f"{c} is null in every row" for c in columns if all(r[c] is None for r in rows)]
    return complaints + [f"{c} < 0 in {r}" for r in rows for c in columns if r[c] is not None and r[c] < 0]


def test_every_story_of_a_live_cluster_is_in_the_tables(told: tuple[Story, Warehouse]) -> None:
    story, warehouse = told
    journeys = warehouse.table("message_journey", message_journey_schema())
    expected = [
        (story.plain, "orders", GROUP, 1, "acked"),
        (story.poison, "orders", GROUP, ATTEMPTS, "dead_lettered"),
        (story.redriven, "orders", GROUP, ATTEMPTS, "redriven"),
        (story.delayed, "later", GROUP, 1, "acked"),
        (story.committed, "payments", GROUP, 1, "acked"),
        (story.checked_back, "payments", GROUP, 1, "acked"),
        (story.rolled_back, "payments", None, 0, "rolled_back"),
    ]
    assertDataFrameEqual(
        journeys.select("message_id", "topic", "group", "attempts", "final_state"),
        warehouse.frame(expected, "message_id STRING, topic STRING, group STRING, attempts INT, final_state STRING"),
    )
    by_id = {row["message_id"]: row for row in journeys.collect()}
    for message_id in (story.plain, story.delayed, story.committed, story.checked_back):
        row = by_id[message_id]
        assert row["sent_at"] <= row["first_delivered_at"] <= row["acked_at"], row
    for message_id in (story.poison, story.redriven):
        row = by_id[message_id]
        assert row["sent_at"] <= row["first_delivered_at"] <= row["dead_lettered_at"], row
        assert row["acked_at"] is None, row
    delayed = by_id[story.delayed]
    # Due DELAY_MS after the gateway took the send; `sent` is written once the send is stored, a little later.
    assert delayed["sent_at"] < delayed["due_at"] <= delayed["sent_at"] + timedelta(milliseconds=DELAY_MS), delayed
    assert delayed["first_delivered_at"] >= delayed["due_at"], "the delayed message was delivered before it was due"


def test_group_hourly_counts_what_the_group_did(told: tuple[Story, Warehouse]) -> None:
    _, warehouse = told
    hourly = warehouse.table("group_hourly", group_hourly_schema())
    counts = ["delivered", "acked", "nacked", "retried", "dead_lettered", "redriven"]
    totals = hourly.groupBy("group", "topic").agg(*(F.sum(c).alias(c) for c in counts))
    two_poisons = 2 * ATTEMPTS
    expected = [
        (GROUP, "orders", 1 + two_poisons, 1, two_poisons, 2 * MAX_RETRIES, 2, 1),
        (GROUP, "later", 1, 1, 0, 0, 0, 0),
        (GROUP, "payments", 2, 2, 0, 0, 0, 0),
    ]
    ddl = "group STRING, topic STRING, " + ", ".join(f"{c} BIGINT" for c in counts)
    assertDataFrameEqual(totals, warehouse.frame(expected, ddl))
    latencies = [f"{kind}_{p}_ms" for kind in ("delivery", "ack") for p in ("p50", "p95", "p99")]
    for topic in ("orders", "later", "payments"):
        rows = hourly.where(F.col("topic") == topic).collect()
        assert sane(rows, *latencies) == [], f"group_hourly latencies of {topic}"


def test_topic_hourly_counts_sends_delays_and_halves(told: tuple[Story, Warehouse]) -> None:
    _, warehouse = told
    hourly = warehouse.table("topic_hourly", topic_hourly_schema())
    totals = hourly.groupBy("topic").agg(
        *(F.sum(c).alias(c) for c in ("sent", "delayed", "transactional")),
        (F.sum("bytes_sent") > 0).alias("has_bytes"),
    )
    expected = [("orders", 3, 0, 0, True), ("later", 1, 1, 0, True), ("payments", 0, 0, 3, False)]
    ddl = "topic STRING, sent BIGINT, delayed BIGINT, transactional BIGINT, has_bytes BOOLEAN"
    assertDataFrameEqual(totals, warehouse.frame(expected, ddl))


def test_delay_daily_counts_the_delayed_message_and_how_late_it_fired(told: tuple[Story, Warehouse]) -> None:
    _, warehouse = told
    daily = warehouse.table("delay_daily", delay_daily_schema())
    counts = ["scheduled", "fired", "cancelled", "rolled", "failed", "lost"]
    totals = daily.groupBy("topic").agg(*(F.sum(c).alias(c) for c in counts))
    ddl = "topic STRING, " + ", ".join(f"{c} BIGINT" for c in counts)
    assertDataFrameEqual(totals, warehouse.frame([("later", 1, 1, 0, 0, 0, 0)], ddl))
    fired = daily.where("fired > 0").collect()
    assert sane(fired, "lateness_p50_ms", "lateness_p95_ms", "lateness_p99_ms") == []


def test_transaction_daily_says_who_ended_each_transaction(told: tuple[Story, Warehouse]) -> None:
    _, warehouse = told
    daily = warehouse.table("transaction_daily", transaction_daily_schema())
    counts = [
        "halves",
        "commits",
        "rollbacks",
        "commits_by_producer",
        "commits_by_checkback",
        "rollbacks_by_producer",
        "rollbacks_by_checkback",
        "abandoned",
        "checks",
    ]
    totals = daily.groupBy("topic").agg(*(F.sum(c).alias(c) for c in counts))
    ddl = "topic STRING, " + ", ".join(f"{c} BIGINT" for c in counts)
    assertDataFrameEqual(totals, warehouse.frame([("payments", 3, 2, 1, 1, 1, 1, 0, 0, 1)], ddl))
    checked = daily.where("checks > 0").collect()
    assert sane(checked, "check_latency_p50_ms", "check_latency_p95_ms", "check_latency_p99_ms") == []


def test_data_quality_finds_every_line_good(told: tuple[Story, Warehouse]) -> None:
    story, warehouse = told
    quality = warehouse.table("data_quality", data_quality_schema())
    quarantined = quality.where("measure = 'quarantined'").groupBy("detail").agg(F.sum("count").alias("count"))
    reasons = ["malformed_json", "wrong_type", "unknown_event", "missing_field"]
    assertDataFrameEqual(quarantined, warehouse.frame([(r, 0) for r in reasons], "detail STRING, count BIGINT"))
    events = quality.where("measure = 'events'").agg(F.sum("count").alias("events")).collect()[0]["events"]
    assert events >= sum(story.events_needed().values()), "fewer events than the story made"
