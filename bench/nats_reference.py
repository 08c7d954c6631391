"""The NATS JetStream reference for durable publishes: 1 KiB messages, 32 in flight, each awaiting its ack.

`python -m bench.nats_reference URL WARMUP SECONDS` runs in its own process,
like bench.loadgen and bench.redis_reference: it creates a stream of its own (a
unique name, file storage, one subject), has 32 tasks each publish a 1 KiB
message and await the stream's ack before the next (nats-py's `js.publish`,
over one connection, as a NATS client multiplexes), counts the acks of the
measured window, deletes the stream, and prints the tally as one JSON line.

What its ack means: the local server's JetStream (file storage, its default
`sync_interval` of two minutes) answers once the message is written to the
stream's file, not once it is fsynced; Petrel's SYNC_FLUSH sends, its
counterpart in `petrel bench datapath`, are answered after the fsync.
`answers(url)` says whether a NATS server answers there at all, so that a
machine without one leaves the figure out.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import uuid
from dataclasses import asdict
from urllib.parse import urlsplit

from bench.loadgen import CONNECTIONS, TEXT_BODY, Tally

LOCAL_NATS = "nats://127.0.0.1:4222"
IN_FLIGHT = CONNECTIONS
MAX_BYTES = 2 * 1024**3
"""the stream keeps at most this much (the oldest go first), so a long run cannot fill the disk"""
ACK_TIMEOUT_S = 10.0


def answers(url: str = LOCAL_NATS, timeout: float = 2.0) -> bool:
    """Whether a NATS server greets a connection at `url` (its first line is `INFO {...}`)."""
    where = urlsplit(url)
    try:
        with socket.create_connection((where.hostname or "127.0.0.1", where.port or 4222), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(5) == b"INFO "
    except OSError:
        return False


def stream_name() -> str:
    return f"petrel-bench-{uuid.uuid4().hex}"


async def drive(url: str, warmup: float, seconds: float, name: str | None = None) -> Tally:
    """Publish to a new stream `name` (a unique one by default) for `warmup` + `seconds`; delete it after."""
    import nats
    import nats.errors
    from nats.js.api import StorageType, StreamConfig

    name = name or stream_name()
    subject = f"{name}.publish"
    body = TEXT_BODY.encode()
    tally = Tally()
    client = await nats.connect(url, name="petrel-bench", allow_reconnect=False)
    try:
        stream = client.jetstream()
        config = StreamConfig(name=name, subjects=[subject], storage=StorageType.FILE, max_bytes=MAX_BYTES)
        await stream.add_stream(config)
        try:

            async def one_publish() -> str | None:
                try:
                    ack = await stream.publish(subject, body, timeout=ACK_TIMEOUT_S)
                except nats.errors.Error as exc:  # a publish not acked is an error of the tally, not of the run
                    return f"{type(exc).__name__}: {exc}"
                return None if ack.stream == name else f"acked by stream {ack.stream!r}"

            await tally.measure(one_publish, IN_FLIGHT, warmup, seconds)
        finally:
            await stream.delete_stream(name)
    finally:
        await client.close()
    return tally


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.nats_reference")
    parser.add_argument("url", help=f"the NATS server, e.g. {LOCAL_NATS}")
    parser.add_argument("warmup", type=float, help="seconds of warm-up")
    parser.add_argument("seconds", type=float, help="seconds measured")
    args = parser.parse_args(argv)
    import uvloop

    tally = uvloop.run(drive(args.url, args.warmup, args.seconds))
    print(json.dumps(asdict(tally)), file=sys.stdout, flush=True)


if __name__ == "__main__":
    main()
