"""EpochFile: at which CommitLog offset each epoch of a broker name began (RocketMQ 5's EpochFileCache).

Under a controller (libs.controller_api) each change of master bumps the broker name's
epoch. The new master writes `(epoch, its log end)` here before it takes a write; a slave
copies its master's entries. Two brokers of a name agree on every byte below the point
where their histories part (`consistent_point`): a broker that returns as a slave
truncates its log there, and copies the rest from its new master.

The file is JSON (`epochs.json` in the store dir), replaced whole (write, sync, rename).
"""

from __future__ import annotations

import json
from pathlib import Path

from libs.private_files import write_private

FILE_NAME = "epochs.json"

Epoch = tuple[int, int]
"""(epoch, the CommitLog offset it began at)"""


class EpochFile:
    def __init__(self, store_dir: Path) -> None:
        self.path = store_dir / FILE_NAME
        self.entries: list[Epoch] = []

    def load(self) -> EpochFile:
        if self.path.exists():
            self.entries = [(int(e), int(s)) for e, s in json.loads(self.path.read_text())]
        return self

    @property
    def last_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def begin(self, epoch: int, start: int) -> None:
        """This broker is master from `epoch` on, its log ending at `start`; written before any write of it."""
        if epoch <= self.last_epoch:
            return
        self.replace([*self.entries, (epoch, start)])

    def replace(self, entries: list[Epoch]) -> None:
        """A slave's copy of its master's history, written once its log agrees with it."""
        write_private(self.path, json.dumps(entries).encode())
        self.entries = list(entries)


def consistent_point(mine: list[Epoch], my_end: int, theirs: list[Epoch], their_end: int) -> int:
    """The CommitLog offset below which my log and theirs hold the same bytes (for me to truncate to).

    The latest epoch both histories hold ends, in each, where the next epoch of that history
    begins (or at its log's end); below the earlier of the two ends, both copied the same
    master. Without a common epoch: a broker with no history (a new slave, or one from
    before the controller) keeps what it has; otherwise nothing is known to agree past the
    first epoch of theirs.
    """
    if not mine:
        return my_end
    common = sorted({e for e, _ in mine} & {e for e, _ in theirs})
    if not common:
        return min(my_end, theirs[0][1]) if theirs else my_end
    epoch = common[-1]
    return min(_end_of(epoch, mine, my_end), _end_of(epoch, theirs, their_end))


def _end_of(epoch: int, history: list[Epoch], end: int) -> int:
    later = [start for e, start in history if e > epoch]
    return min(later) if later else end
