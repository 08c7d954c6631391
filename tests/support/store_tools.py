"""`petrel store check|dump` on real stores written by MessageStore, whole and damaged in each way."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.cli import main
from libs.codec import encode_record
from libs.message import MessageRecord
from libs.store.config import StoreConfig
from libs.store.consume_queue import UNIT
from libs.store.message_store import MessageStore, PutResult
from libs.store.tools.shared import CheckReport

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
SEGMENT = 256 * 1024
BODY_PAD = b"x" * 1000  # about 230 records to a segment
COUNT = 600


def store_config(root: Path) -> StoreConfig:
    return StoreConfig(
        root=root, segment_size=SEGMENT, index_slot_count=1024, index_max_entries=100_000, cq_units_per_file=50
    )


def message(i: int, topic: str, queue_id: int, *, tag: str = "TagA") -> bytes:
    body = f"message {i} ".encode() + BODY_PAD
    properties = {"TAGS": tag, "UNIQ_KEY": f"ID{i:04d}", "KEYS": f"k{i} j{i}"}
    return encode_record(MessageRecord(topic=topic, body=body, queue_id=queue_id, properties=properties))


def messages(first: int, count: int) -> list[bytes]:
    """orders/0..3 in turn, and every tenth one to audit/0 instead."""
    return [
        message(i, "audit", 0, tag="TagB") if i % 10 == 9 else message(i, "orders", i % 4)
        for i in range(first, first + count)
    ]


def open_store(root: Path) -> MessageStore:
    store = MessageStore(store_config(root), clock=lambda: T0)
    store.open()
    return store


async def write_store(root: Path, records: list[bytes]) -> list[PutResult]:
    """A store holding `records`, closed cleanly; what each put stored."""
    store = open_store(root)
    store.start()
    results = [
        r
        for batch in range(0, len(records), 50)
        for r in (await store.put(b"".join(records[batch : batch + 50]))).stored
    ]
    await store.close()
    return results


def crash(store: MessageStore) -> None:
    """What kill -9 leaves: the maps' bytes in the files, units still in memory lost, the abort file."""
    store.index.close()
    store.queues.close()
    store.commitlog.close()


@dataclass
class Store:
    root: Path
    puts: list[PutResult]

    def segment(self, offset: int) -> Path:
        return self.root / "commitlog" / f"{offset - offset % SEGMENT:020d}"

    def write(self, offset: int, data: bytes) -> None:
        """Overwrite CommitLog bytes at `offset`, as a bad disk would."""
        fd = os.open(self.segment(offset), os.O_WRONLY)
        try:
            os.pwrite(fd, data, offset % SEGMENT)
        finally:
            os.close(fd)

    def read(self, offset: int, size: int) -> bytes:
        with self.segment(offset).open("rb") as f:
            f.seek(offset % SEGMENT)
            return f.read(size)

    def queue_file(self, topic: str, queue_id: int, unit: int = 0) -> Path:
        return self.root / "consumequeue" / topic / str(queue_id) / f"{(unit - unit % 50) * UNIT.size:020d}"

    def write_unit(self, topic: str, queue_id: int, unit: int, value: tuple[int, int, int]) -> None:
        fd = os.open(self.queue_file(topic, queue_id, unit), os.O_WRONLY)
        try:
            os.pwrite(fd, UNIT.pack(*value), (unit % 50) * UNIT.size)
        finally:
            os.close(fd)

    def put(self, topic: str, queue_id: int, queue_offset: int) -> PutResult:
        return next(p for p in self.puts if (p.topic, p.queue_id, p.queue_offset) == (topic, queue_id, queue_offset))

    @property
    def end(self) -> int:
        return self.puts[-1].physical_offset + self.puts[-1].size


async def written_store(tmp_path: Path) -> Store:
    """A cleanly closed store of COUNT messages over two topics (behind the `store` fixture)."""
    root = tmp_path / "broker-a"
    return Store(root, await write_store(root, messages(0, COUNT)))


def seg(offset: int) -> str:
    """The CommitLog segment holding `offset`, as problems name it."""
    return f"commitlog/{offset - offset % SEGMENT:020d}"


def cq(topic: str, queue_id: int, unit: int) -> str:
    """The ConsumeQueue file holding `unit`, as problems name it."""
    return f"consumequeue/{topic}/{queue_id}/{(unit - unit % 50) * UNIT.size:020d}"


def lines(report: CheckReport) -> list[str]:
    return [str(p) for p in report.problems]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    """`petrel ARGV...`: (exit code, stdout lines, stderr)."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    code = exit_info.value.code
    captured = capsys.readouterr()
    return (code if isinstance(code, int) else 1), captured.out.splitlines(), captured.err


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }
