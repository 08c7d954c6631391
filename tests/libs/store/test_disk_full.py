"""A full disk (ENOSPC, injected at the OS boundary): a clear error, nothing answered that is not stored, no damage.

The refusal of a put when a new segment finds no room is in tests/libs/store/test_retention.py.
"""

from __future__ import annotations

import errno
import os

import pytest

from libs.errors import StoreFull
from libs.store.checkpoint import Checkpoint
from libs.store.config import FlushMode
from libs.store.tools.check import check_store
from tests.support.store import Stores, pull_all, record, stored

BODY = bytes(1500)


def no_space(monkeypatch: pytest.MonkeyPatch, call: str, when: int | None = None) -> None:
    """`os.<call>` fails as on a full disk (posix_fallocate: only for a `when`-byte file)."""
    real = getattr(os, call)

    def full(fd: int, *args: object) -> object:
        if when is None or when in args:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, *args)

    monkeypatch.setattr(os, call, full)


async def test_a_full_disk_at_a_segment_roll_leaves_a_store_that_checks_clean(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores.open(flush_mode=FlushMode.SYNC_FLUSH)
    store.start()
    sent: list[bytes] = []
    while store.commitlog.write_offset + len(record("T", 0, BODY)) + 8 <= 65536:
        sent.append(f"{len(sent):05d}".encode() + BODY)
        stored(await store.put(record("T", 0, sent[-1])))
    no_space(monkeypatch, "posix_fallocate", 65536)
    outcome = await store.put(record("T", 0, b"no room" + BODY) + record("T", 0, b"after it"))
    assert outcome.stored == []
    assert isinstance(outcome.failure, StoreFull)
    assert outcome.failure.status == 507
    assert [p.name for p in store.config.commitlog_dir.iterdir()] == [f"{0:020d}"]  # no half-made segment
    await stores.close(store)
    monkeypatch.undo()

    report = check_store(stores.root)
    assert (report.ok, report.problems, report.records) == (True, (), len(sent))
    store = stores.open()
    assert stores.report.clean
    assert pull_all(store, "T", 0) == sent


async def test_a_full_disk_refusing_consume_queue_writes_fails_no_durable_put_and_holds_the_checkpoint(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores.open(flush_mode=FlushMode.SYNC_FLUSH, checkpoint_interval_ms=0)  # every flush checkpoints
    store.start()
    [first] = stored(await store.put(record("T", 0, b"first")))
    await store.flusher.flush(checkpoint=True)
    before = Checkpoint.read(store.config.checkpoint_path)
    assert before is not None, "the flush wrote no checkpoint"
    no_space(monkeypatch, "pwrite")
    [second] = stored(await store.put(record("T", 0, b"second")))  # its CommitLog bytes are durable
    assert store.commitlog.flushed_offset >= second.physical_offset + second.size
    assert not store.read_only  # a full disk is not a failed sync
    assert Checkpoint.read(store.config.checkpoint_path) == before
    assert pull_all(store, "T", 0) == [b"first", b"second"]
    monkeypatch.undo()
    await stores.close(store)

    assert check_store(stores.root).problems == ()
    store = stores.open()
    assert pull_all(store, "T", 0) == [b"first", b"second"]
    assert first.queue_offset == 0
