"""Transactions: a write conditioned on what was read goes through only while that still holds."""

from __future__ import annotations

import pytest

from libs.etcd import Compare, Delete, EtcdClient, EtcdCompareFailed, Get, Put, RangeResult, TxnResult


async def test_a_write_conditioned_on_the_revision_read_fails_once_another_wrote(client: EtcdClient) -> None:
    await client.put("assignment/broker-a", b"epoch 1")
    seen = await client.get("assignment/broker-a")
    assert seen is not None

    mine = client.txn().when(Compare.mod_revision("assignment/broker-a", "==", seen.mod_revision))
    theirs = client.txn().when(Compare.mod_revision("assignment/broker-a", "==", seen.mod_revision))
    first = await theirs.then(Put("assignment/broker-a", b"epoch 2 (theirs)")).commit()
    assert first.succeeded

    second = (
        await mine.then(Put("assignment/broker-a", b"epoch 2 (mine)")).otherwise(Get("assignment/broker-a")).commit()
    )
    assert not second.succeeded
    current = second.responses[0]
    assert isinstance(current, RangeResult)
    assert current.kvs[0].value == b"epoch 2 (theirs)"
    assert (await client.get("assignment/broker-a")).value == b"epoch 2 (theirs)"  # type: ignore[union-attr]


async def test_commit_or_raise_says_the_compare_failed_and_what_the_failure_branch_read(client: EtcdClient) -> None:
    await client.put("epochs/next", b"7")
    txn = (
        client.txn()
        .when(Compare.value("epochs/next", "==", b"6"))
        .then(Put("epochs/next", b"7"))
        .otherwise(Get("epochs/next"))
    )
    with pytest.raises(EtcdCompareFailed, match="epochs/next") as raised:
        await txn.commit_or_raise()
    read = raised.value.result.responses[0]
    assert isinstance(read, RangeResult)
    assert read.kvs[0].value == b"7"


async def test_create_if_absent_succeeds_once(client: EtcdClient) -> None:
    async def create() -> TxnResult:
        return await (
            client.txn()
            .when(Compare.create_revision("controller/state", "==", 0))
            .then(Put("controller/state", b"imported"))
            .commit()
        )

    assert (await create()).succeeded
    assert not (await create()).succeeded


async def test_a_successful_branch_applies_all_its_operations_at_one_revision(client: EtcdClient) -> None:
    await client.put("in-sync/broker-a", b"0,1")
    await client.put("in-sync/broker-a/version", b"3")
    result = await (
        client.txn()
        .when(Compare.version("in-sync/broker-a", ">", 0), Compare.value("in-sync/broker-a/version", "==", b"3"))
        .then(
            Put("in-sync/broker-a", b"0"),
            Put("in-sync/broker-a/version", b"4"),
            Delete("in-sync/broker-a/pending", prev_kv=True),
            Get("in-sync/", prefix=True),
        )
        .commit_or_raise()
    )
    read = result.responses[-1]
    assert isinstance(read, RangeResult)
    assert {kv.key: kv.value for kv in read.kvs} == {b"in-sync/broker-a": b"0", b"in-sync/broker-a/version": b"4"}
    assert {kv.mod_revision for kv in read.kvs} == {result.revision}
