"""IndexFile and IndexService: keys to CommitLog offsets, by time range, across files and crashes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from libs.store.index_file import (
    HEADER_SIZE,
    CorruptIndexFile,
    IndexFile,
    file_name,
    file_size,
)
from libs.store.index_service import IndexService
from tests.support.clock import FakeClock
from tests.support.examples import examples

T0 = 1_700_000_000_000  # ms
REPO = Path(__file__).resolve().parents[3]
EVERYTHING = (0, 2**62)


@pytest.fixture
def index_file(tmp_path: Path) -> Iterator[IndexFile]:
    index_file = IndexFile.create(tmp_path / "index", slot_count=64, max_entries=100, begin_timestamp=T0)
    yield index_file
    index_file.close()


def open_service(directory: Path, *, slot_count: int = 16, max_entries: int = 4) -> IndexService:
    service = IndexService(directory, slot_count=slot_count, max_entries=max_entries, clock=FakeClock(T0 / 1000))
    service.load()
    return service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[IndexService]:
    service = open_service(tmp_path / "index")
    yield service
    service.close()


# --- IndexFile -------------------------------------------------------------------------------


def test_a_put_key_is_found_with_its_offset(index_file: IndexFile) -> None:
    assert index_file.put("T#order-1", 4096, T0 + 10)
    assert index_file.lookup("T#order-1", *EVERYTHING, limit=32) == [4096]
    assert index_file.lookup("T#order-2", *EVERYTHING, limit=32) == []


def test_a_new_file_is_sparse_at_full_size_and_empty(index_file: IndexFile) -> None:
    assert index_file.path.stat().st_size == file_size(64, 100) == HEADER_SIZE + 64 * 4 + 100 * 20
    assert (index_file.entry_count, index_file.is_full) == (0, False)
    assert (index_file.begin_timestamp, index_file.end_timestamp) == (T0, T0)


def test_the_header_follows_the_puts(index_file: IndexFile) -> None:
    index_file.put("T#a", 100, T0 + 5_000)
    index_file.put("T#b", 200, T0 + 9_000)
    assert (index_file.begin_phy_offset, index_file.end_phy_offset) == (100, 200)
    assert (index_file.begin_timestamp, index_file.end_timestamp) == (T0, T0 + 9_000)
    assert index_file.entry_count == 2


def test_lookup_keeps_entries_whose_second_overlaps_the_range(index_file: IndexFile) -> None:
    for phy_offset, at in [(0, T0 + 500), (10, T0 + 1_500), (20, T0 + 2_999), (30, T0 + 3_000)]:
        index_file.put("T#k", phy_offset, at)
    assert index_file.lookup("T#k", T0 + 1_000, T0 + 2_000, 32) == [20, 10]
    # second-granular: 1_999 and 2_000 lie in the seconds of the entries at 1_500 and 2_999
    assert index_file.lookup("T#k", T0 + 1_999, T0 + 2_000, 32) == [20, 10]
    assert index_file.lookup("T#k", T0 + 3_000, T0 + 9_000, 32) == [30]
    assert index_file.lookup("T#k", T0 - 5_000, T0 - 1, 32) == []


def test_lookup_is_newest_first_and_stops_at_the_limit(index_file: IndexFile) -> None:
    for i in range(10):
        index_file.put("T#k", i * 100, T0 + i)
    assert index_file.lookup("T#k", *EVERYTHING, limit=3) == [900, 800, 700]
    assert index_file.lookup("T#k", *EVERYTHING, limit=0) == []


def test_keys_sharing_one_slot_never_miss_their_own_offsets(tmp_path: Path) -> None:
    index_file = IndexFile.create(tmp_path / "index", slot_count=2, max_entries=300, begin_timestamp=T0)
    expected: dict[str, list[int]] = {}
    for i in range(300):
        key = f"T#key-{i % 37}"
        index_file.put(key, i, T0 + i)
        expected.setdefault(key, []).insert(0, i)
    for key, offsets in expected.items():
        assert index_file.lookup(key, *EVERYTHING, limit=1000) == offsets, key
    index_file.close()


def test_keys_with_the_same_crc32_share_their_offsets(index_file: IndexFile) -> None:
    # entries keep only the hash; the caller re-checks the key in the CommitLog record
    assert zlib.crc32(b"T#k7") == zlib.crc32(b"T#k22763470")
    index_file.put("T#k7", 100, T0)
    index_file.put("T#k22763470", 200, T0)
    assert index_file.lookup("T#k7", *EVERYTHING, limit=32) == [200, 100]


def test_a_message_indexed_twice_is_found_once(index_file: IndexFile) -> None:
    index_file.put("T#k", 100, T0)
    index_file.put("T#k", 100, T0)
    assert index_file.lookup("T#k", *EVERYTHING, limit=32) == [100]


def test_a_full_file_refuses_a_put(tmp_path: Path) -> None:
    index_file = IndexFile.create(tmp_path / "index", slot_count=4, max_entries=3, begin_timestamp=T0)
    assert [index_file.put(f"T#{i}", i, T0) for i in range(4)] == [True, True, True, False]
    assert index_file.is_full
    assert index_file.lookup("T#3", *EVERYTHING, limit=32) == []
    index_file.close()


def test_put_many_writes_the_file_as_put_of_each_does(tmp_path: Path) -> None:
    """Keys crowding 5 slots (chains inside one call), a second call, and a call the file has no room for."""
    keys = [f"T#{i % 9}" for i in range(14)]
    one_by_one = IndexFile.create(tmp_path / "one", slot_count=5, max_entries=12, begin_timestamp=T0)
    assert [one_by_one.put(key, 100 + i, T0 + 1500) for i, key in enumerate(keys)] == [True] * 12 + [False] * 2
    many = IndexFile.create(tmp_path / "many", slot_count=5, max_entries=12, begin_timestamp=T0)
    hashes = [zlib.crc32(key.encode()) for key in keys]
    offsets = [100 + i for i in range(len(keys))]

    assert many.put_many(hashes[:3], offsets[:3], T0 + 1500, 0) == 3
    assert many.put_many(hashes, offsets, T0 + 1500, 3) == 9  # 12 entries fit; the last two do not

    assert many.put_many(hashes, offsets, T0 + 1500, 12) == 0
    assert many._map[:] == one_by_one._map[:]
    assert many.lookup("T#4", *EVERYTHING, limit=32) == [104]
    one_by_one.close()
    many.close()


def test_a_reopened_file_has_its_entries_and_header(tmp_path: Path) -> None:
    index_file = IndexFile.create(tmp_path / "index", slot_count=8, max_entries=10, begin_timestamp=T0)
    index_file.put("T#a", 100, T0 + 1_000)
    index_file.put("T#a", 200, T0 + 2_000)
    index_file.flush()
    index_file.close()
    reopened = IndexFile.open(tmp_path / "index")
    assert reopened.lookup("T#a", *EVERYTHING, limit=32) == [200, 100]
    assert (reopened.slot_count, reopened.max_entries, reopened.entry_count) == (8, 10, 2)
    assert (reopened.end_phy_offset, reopened.end_timestamp) == (200, T0 + 2_000)
    assert reopened.put("T#a", 300, T0 + 3_000)
    assert reopened.lookup("T#a", *EVERYTHING, limit=32) == [300, 200, 100]
    reopened.close()


def test_entries_survive_a_killed_process(tmp_path: Path) -> None:
    path = tmp_path / "index"
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from libs.store.index_file import IndexFile\n"
        f"f = IndexFile.create(Path(sys.argv[1]), slot_count=8, max_entries=10, begin_timestamp={T0})\n"
        f"f.put('T#a', 100, {T0}); f.put('T#b', 200, {T0})\n"
        "os.kill(os.getpid(), signal.SIGKILL)  # no flush, no close\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], cwd=REPO, check=False)
    assert done.returncode == -signal.SIGKILL
    reopened = IndexFile.open(path)
    assert reopened.lookup("T#a", *EVERYTHING, limit=32) == [100]
    assert reopened.lookup("T#b", *EVERYTHING, limit=32) == [200]
    reopened.close()


def test_truncate_after_forgets_the_tail_and_lets_its_offsets_be_reused(tmp_path: Path) -> None:
    index_file = IndexFile.create(tmp_path / "index", slot_count=1, max_entries=20, begin_timestamp=T0)
    for i in range(6):
        index_file.put(f"T#k{i % 2}", i * 100, T0 + i)
    index_file.truncate_after(300)
    assert (index_file.entry_count, index_file.end_phy_offset) == (3, 200)
    assert index_file.lookup("T#k0", *EVERYTHING, limit=32) == [200, 0]
    assert index_file.lookup("T#k1", *EVERYTHING, limit=32) == [100]
    index_file.put("T#k1", 300, T0 + 9)  # the CommitLog writes a new message where the torn one was
    index_file.truncate_after(400)  # a second recovery run changes nothing
    index_file.close()
    reopened = IndexFile.open(tmp_path / "index")
    assert reopened.lookup("T#k1", *EVERYTHING, limit=32) == [300, 100]
    assert reopened.lookup("T#k0", *EVERYTHING, limit=32) == [200, 0]
    reopened.truncate_after(0)
    assert (reopened.entry_count, reopened.lookup("T#k0", *EVERYTHING, limit=32)) == (0, [])
    reopened.close()


def write_index(path: Path, *, slot_count: int = 8, max_entries: int = 10) -> None:
    index_file = IndexFile.create(path, slot_count=slot_count, max_entries=max_entries, begin_timestamp=T0)
    index_file.put("T#a", 100, T0)
    index_file.close()


def test_a_truncated_file_is_corrupt_and_named(tmp_path: Path) -> None:
    path = tmp_path / "20240101000000000"
    write_index(path)
    os.truncate(path, file_size(8, 10) - 20)
    with pytest.raises(CorruptIndexFile) as caught:
        IndexFile.open(path)
    assert str(caught.value) == f"index file {path}: {file_size(8, 10) - 20} bytes, but 8 slots and 10 entries take 284"


@pytest.mark.parametrize(
    ("offset", "data", "reason"),
    [
        (40, b"RMQ!", "magic is b'RMQ!', not b'PIDX'"),
        (36, (12).to_bytes(4, "big"), "index_count 12 is outside 1..11"),
        (32, (9).to_bytes(4, "big"), "9 slots in use of 8"),
    ],
)
def test_a_damaged_header_is_corrupt(tmp_path: Path, offset: int, data: bytes, reason: str) -> None:
    path = tmp_path / "index"
    write_index(path)
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(data)
    with pytest.raises(CorruptIndexFile, match=re.escape(f"index file {path}: {reason}")) as caught:
        IndexFile.open(path)
    assert caught.value.path == path


def test_a_file_shorter_than_a_header_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "index"
    path.write_bytes(b"PIDX")
    with pytest.raises(CorruptIndexFile, match="4 bytes is shorter than the 52-byte header"):
        IndexFile.open(path)


# --- IndexService ----------------------------------------------------------------------------


def test_keys_are_found_by_topic_and_the_message_id_without_one(service: IndexService) -> None:
    service.put_keys("Orders", ["o-1", "o-2"], "MSGID-1", 100, T0)
    service.put_keys("Refunds", ["o-1"], None, 200, T0)
    assert service.query("Orders", "o-1", *EVERYTHING) == [100]
    assert service.query("Orders", "o-2", *EVERYTHING) == [100]
    assert service.query("Refunds", "o-1", *EVERYTHING) == [200]
    assert service.query_unique("MSGID-1", *EVERYTHING) == [100]
    assert service.query("Orders", "MSGID-1", *EVERYTHING) == []


def test_empty_keys_are_not_indexed(service: IndexService) -> None:
    service.put_keys("Orders", ["", "o-1"], "", 100, T0)
    assert [f.entry_count for f in service.files] == [1]


def test_a_full_file_rolls_over_and_queries_span_files_newest_first(service: IndexService) -> None:
    for i in range(5):  # 3 entries a message, 4 entries a file
        service.put_keys("T", ["k", f"only-{i}"], f"ID-{i}", i * 100, T0 + i * 1000)
    names = [f.path.name for f in service.files]
    assert len(names) == 4
    assert names == sorted(names)
    assert names[0] == file_name(T0) == "20231114221320000"
    assert service.query("T", "k", *EVERYTHING) == [400, 300, 200, 100, 0]
    assert service.query("T", "k", *EVERYTHING, limit=2) == [400, 300]
    assert service.query("T", "k", T0 + 1_000, T0 + 3_000) == [300, 200, 100]
    assert service.query_unique("ID-1", *EVERYTHING) == [100]
    assert service.max_phy_offset == 400


def test_a_message_whose_keys_straddle_two_files_is_found_once(tmp_path: Path) -> None:
    service = open_service(tmp_path, max_entries=2)
    service.put_keys("T", ["a"], None, 0, T0)
    service.put_keys("T", ["a", "a"], None, 100, T0)  # fills the first file, starts the second
    assert len(service.files) == 2
    assert service.query("T", "a", *EVERYTHING) == [100, 0]
    assert service.query("T", "a", *EVERYTHING, limit=1) == [100]
    service.close()


def test_a_reloaded_directory_goes_on_in_its_newest_file(tmp_path: Path) -> None:
    service = open_service(tmp_path)
    for i in range(3):
        service.put_keys("T", ["k"], f"ID-{i}", i * 100, T0 + i)
    service.close()
    reloaded = open_service(tmp_path)
    assert (len(reloaded.files), reloaded.max_phy_offset) == (2, 200)
    reloaded.put_keys("T", ["k"], None, 300, T0 + 3)
    assert len(reloaded.files) == 2
    assert reloaded.query("T", "k", *EVERYTHING) == [300, 200, 100, 0]
    reloaded.close()


def test_a_redispatched_message_is_not_indexed_again(service: IndexService) -> None:
    service.put_keys("T", ["k"], "ID-0", 0, T0)
    service.put_keys("T", ["k"], "ID-1", 100, T0)
    service.put_keys("T", ["k"], "ID-0", 0, T0)  # recovery re-dispatches from max_phy_offset
    service.put_keys("T", ["k"], "ID-1", 100, T0)
    assert service.query("T", "k", *EVERYTHING) == [100, 0]
    assert service.query_unique("ID-1", *EVERYTHING) == [100]


def test_an_empty_file_left_by_a_crash_is_dropped_on_load(tmp_path: Path) -> None:
    service = open_service(tmp_path)
    service.put_keys("T", ["k"], None, 100, T0)
    service.close()
    IndexFile.create(tmp_path / file_name(T0 + 1), slot_count=16, max_entries=4, begin_timestamp=T0).close()
    reloaded = open_service(tmp_path)
    assert (len(reloaded.files), reloaded.max_phy_offset) == (1, 100)
    assert sorted(p.name for p in tmp_path.iterdir()) == [file_name(T0)]
    reloaded.close()


def test_a_clock_going_back_still_names_files_in_order(tmp_path: Path) -> None:
    clock = FakeClock()
    service = IndexService(tmp_path, slot_count=4, max_entries=1, clock=clock)
    service.load()
    for i in range(3):
        clock.now -= 3600
        service.put_keys("T", ["k"], None, i, T0)
    assert [f.path.name for f in service.files] == [file_name(T0 - 3_600_000 + i) for i in range(3)]
    service.close()


def test_truncate_after_deletes_later_files_and_rolls_back_the_one_across_the_cut(tmp_path: Path) -> None:
    service = open_service(tmp_path, max_entries=3)
    for i in range(4):  # files: [0 0 100] [100 200 200] [300 300]
        service.put_keys("T", ["k"], f"ID-{i}", i * 100, T0 + i)
    service.truncate_after(100)
    assert [f.entry_count for f in service.files] == [2]
    assert len(list(tmp_path.iterdir())) == 1
    assert service.max_phy_offset == 0
    assert service.query("T", "k", *EVERYTHING) == [0]
    assert service.query_unique("ID-1", *EVERYTHING) == []
    service.put_keys("T", ["other"], "ID-X", 100, T0 + 10)  # the CommitLog reuses offset 100
    assert service.query("T", "k", *EVERYTHING) == [0]
    assert service.query("T", "other", *EVERYTHING) == [100]
    assert service.query_unique("ID-X", *EVERYTHING) == [100]
    service.close()


def test_truncate_after_everything_empties_the_directory(service: IndexService) -> None:
    service.put_keys("T", ["k"], None, 100, T0)
    service.truncate_after(0)
    assert (service.files, service.max_phy_offset) == ((), 0)
    service.put_keys("T", ["k"], None, 0, T0)
    assert service.query("T", "k", *EVERYTHING) == [0]


def test_delete_files_before_removes_whole_old_files_but_never_the_newest(tmp_path: Path) -> None:
    service = open_service(tmp_path, max_entries=2)
    for i in range(5):  # files end at 100, 300, 400
        service.put_keys("T", ["k"], None, i * 100, T0 + i)
    assert service.delete_files_before(100) == 0
    assert service.delete_files_before(301) == 2
    assert service.query("T", "k", *EVERYTHING) == [400]
    assert service.delete_files_before(10_000) == 0
    assert len(list(tmp_path.iterdir())) == 1
    service.close()


def test_a_corrupt_file_fails_the_load_naming_it(tmp_path: Path) -> None:
    path = tmp_path / file_name(T0)
    write_index(path)
    os.truncate(path, 100)
    with pytest.raises(CorruptIndexFile, match=f"^index file {path}: 100 bytes"):
        open_service(tmp_path)


# --- the service against a model -------------------------------------------------------------

KEYS = st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=3)


class IndexServiceModel(RuleBasedStateMachine):
    """Every key's query equals a model filtered by crc32, through rolls, truncations and reloads."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[tuple[str, int, int]] = []  # full key, phy offset, store timestamp
        self.next_offset = 0
        self.now = T0

    @initialize()
    def start(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.service = open_service(Path(self.tmp.name), slot_count=3, max_entries=5)

    def teardown(self) -> None:
        self.service.close()
        self.tmp.cleanup()

    @rule(keys=KEYS, with_id=st.booleans(), size=st.integers(1, 50), elapsed=st.integers(0, 2_500))
    def put(self, keys: list[str], with_id: bool, size: int, elapsed: int) -> None:
        self.now += elapsed
        unique = f"ID-{self.next_offset}" if with_id else None
        self.service.put_keys("T", keys, unique, self.next_offset, self.now)
        full_keys = [f"T#{k}" for k in keys] + ([f"#UNIQ#{unique}"] if unique else [])
        self.entries += [(key, self.next_offset, self.now) for key in full_keys]
        self.next_offset += size

    @precondition(lambda self: self.next_offset > 0)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        cut = data.draw(st.integers(0, self.next_offset))
        self.service.truncate_after(cut)
        self.entries = [entry for entry in self.entries if entry[1] < cut]
        self.next_offset = cut

    @rule()
    def reload(self) -> None:
        self.service.close()
        self.service = open_service(Path(self.tmp.name), slot_count=3, max_entries=5)

    @invariant()
    def every_key_finds_exactly_its_offsets(self) -> None:
        for key in ["a", "b", "c", "d", "e"]:
            assert self.service.query("T", key, *EVERYTHING, limit=10_000) == self.expected(f"T#{key}")
        for _, phy_offset, _ in self.entries:
            assert self.service.query_unique(f"ID-{phy_offset}", *EVERYTHING) == self.expected(f"#UNIQ#ID-{phy_offset}")

    @rule(data=st.data())
    def query_a_time_range(self, data: st.DataObject) -> None:
        begin = data.draw(st.integers(T0 - 1_000, self.now + 1_000))
        end = data.draw(st.integers(begin, self.now + 2_000))
        key = data.draw(st.sampled_from(["a", "b", "c"]))
        found = self.service.query("T", key, begin, end, limit=10_000)
        exact = self.expected(f"T#{key}", lambda at: begin <= at <= end)
        same_second = self.expected(f"T#{key}", lambda at: begin - 1000 < at < end + 1000)  # seconds overlap
        assert set(exact) <= set(found) <= set(same_second)
        assert found == sorted(found, reverse=True)

    def expected(self, key: str, when: Callable[[int], bool] = lambda at: True) -> list[int]:
        key_hash = zlib.crc32(key.encode())
        offsets: list[int] = []
        for entry_key, phy_offset, at in reversed(self.entries):
            if zlib.crc32(entry_key.encode()) != key_hash or not when(at):
                continue
            if not offsets or offsets[-1] != phy_offset:
                offsets.append(phy_offset)
        return offsets


TestIndexServiceModel = IndexServiceModel.TestCase
TestIndexServiceModel.settings = settings(
    max_examples=examples(60), stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
