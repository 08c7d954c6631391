"""The lifecycle event writer: buffered JSON lines, rotated hourly, never blocking a request.

`emit` (one event) and `emit_batch` (the events of one call as one line: the contract's
batch lines) check the events against the contract, encode them (a value JSON cannot
hold is a ValueError there, at the caller) and append the line to a buffer; a background
thread writes the buffer every `flush_interval` seconds to the file of each line's UTC hour.
When the buffer is full (the disk cannot keep up), new events are dropped and
counted in `dropped` rather than slowing a send down. `close` writes what is
left, so a clean shutdown loses nothing. A disabled writer still checks each
event against the contract, then drops it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Set
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, NoReturn

import orjson

from libs.events.contract import BATCH, EVENTS, EventSpec

log = logging.getLogger(__name__)


class EventWriter:
    def __init__(
        self,
        export_root: Path,
        service: str,
        *,
        flush_interval: float = 1.0,
        max_buffered: int = 200_000,
        clock: Callable[[], float] = time.time,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self.root = export_root / "events"
        self.service = service
        self.pid = os.getpid()
        self.flush_interval = flush_interval
        self.max_buffered = max_buffered
        self.clock = clock
        self.dropped = 0
        self.written = 0
        self._buffer: deque[tuple[int, bytes]] = deque()
        """(ts in ms, the encoded line) in emit order."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._write_lock = threading.Lock()
        self._open_path: Path | None = None
        self._path_hour = -1
        self._path = self.root
        self._open_file: IO[bytes] | None = None

    def emit(self, event: str, **fields: Any) -> None:
        spec = _spec(event)
        keys = fields.keys()
        if not (keys >= spec.required and keys <= spec.fields):  # compared in place: no sets made per event
            _refuse(event, spec, keys)
        if not self.enabled:
            return
        if len(self._buffer) >= self.max_buffered:
            self.dropped += 1
            return
        ts = int(self.clock() * 1000)
        line = {"ts": ts, "event": event, "service": self.service, "pid": self.pid}
        line.update(fields)
        self._append_line(event, ts, line)

    def emit_batch(self, event: str, items: list[dict[str, Any]], **shared: Any) -> None:
        """The events of one call as one line: `shared` once, each message's own fields in `items` (contract).

        Items with the keys of the first are checked once; one item is written as a plain line.
        """
        if not items:
            return
        spec = _spec(event)
        first = items[0].keys()
        for item in items:
            keys = item.keys()
            if keys != first:
                _check_batch(event, spec, keys, shared)
        _check_batch(event, spec, first, shared)
        if not self.enabled:
            return
        if len(self._buffer) >= self.max_buffered:
            self.dropped += len(items)
            return
        ts = int(self.clock() * 1000)
        line = {"ts": ts, "event": event, "service": self.service, "pid": self.pid}
        line.update(shared)
        if len(items) == 1:
            line.update(items[0])
        else:
            line[BATCH] = items
        self._append_line(event, ts, line)

    def _append_line(self, event: str, ts: int, line: dict[str, Any]) -> None:
        try:
            encoded = orjson.dumps(line) + b"\n"
        except TypeError as exc:
            raise ValueError(f"event {event!r}: a field value cannot be written as JSON: {exc}") from exc
        self._buffer.append((ts, encoded))

    def start(self) -> None:
        if not self.enabled:
            return
        self._thread = threading.Thread(target=self._run, name=f"events-{self.service}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.flush()
        with self._write_lock:
            self._close_file()

    def flush(self) -> None:
        """Write everything buffered so far (safe to call from any thread)."""
        with self._write_lock:
            while self._buffer:
                batch: list[bytes] = []
                hour = self._buffer[0][0] // 3_600_000
                path = self.path_for(self._buffer[0][0])
                while self._buffer and self._buffer[0][0] // 3_600_000 == hour:
                    batch.append(self._buffer.popleft()[1])
                self._append(path, b"".join(batch))
                self.written += len(batch)

    def path_for(self, ts_ms: int) -> Path:
        hour = ts_ms // 3_600_000
        if hour != self._path_hour:
            moment = datetime.fromtimestamp(hour * 3600, tz=UTC)
            hour_dir = self.root / f"dt={moment:%Y-%m-%d}" / f"hour={moment:%H}"
            self._path_hour, self._path = hour, hour_dir / f"{self.service}-{self.pid}.jsonl"
        return self._path

    def _append(self, path: Path, data: bytes) -> None:
        if path != self._open_path:
            self._close_file()
            path.parent.mkdir(parents=True, exist_ok=True)
            self._open_file = path.open("ab")
            self._open_path = path
        assert self._open_file is not None
        self._open_file.write(data)
        self._open_file.flush()

    def _close_file(self) -> None:
        if self._open_file is not None:
            self._open_file.close()
        self._open_file = None
        self._open_path = None

    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval):
            try:
                self.flush()
            except Exception:
                log.exception("writing lifecycle events under %s failed; will try again", self.root)


def _spec(event: str) -> EventSpec:
    spec = EVENTS.get(event)
    if spec is None:
        raise ValueError(f"unknown lifecycle event {event!r}")
    return spec


def _refuse(event: str, spec: EventSpec, keys: Set[str]) -> NoReturn:
    missing, unknown = spec.required - keys, keys - spec.fields
    raise ValueError(f"event {event!r}: missing {sorted(missing)}, not in the contract {sorted(unknown)}")


def _check_batch(event: str, spec: EventSpec, keys: Set[str], shared: dict[str, Any]) -> None:
    """One message of a batch line: its fields and the line's are its event's, each in one place only."""
    if not shared.keys().isdisjoint(keys):
        raise ValueError(f"event {event!r}: {sorted(shared.keys() & keys)} given for the batch and for a message")
    fields = keys | shared.keys()
    if not (fields >= spec.required and fields <= spec.fields):
        _refuse(event, spec, fields)
