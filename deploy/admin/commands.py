"""The admin commands: each reads `/v1` through GatewayCalls and prints a table, or the answer with `--json`.

`petrel lag billing` answers "how far behind is billing?"; `petrel trace ID` answers "why is
this message not acked?". `petrel status` is the local view of what `petrel up` started (its
<data>/run/cluster.json and each process's /healthz), not a gateway call.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from deploy.admin import local_status
from deploy.admin.gateway import AdminError, GatewayCalls
from deploy.admin.tables import table
from libs.timeparse import parse_time_ms

Command = Callable[[GatewayCalls, argparse.Namespace], Any]
"""Returns what `--json` prints; prints its table itself."""

COMMANDS = ("topics", "groups", "lag", "peek", "tail", "trace", "dlq", "status")


def add_arguments(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--json", action="store_true", help="print the gateway's answer as JSON, for scripts")
        return p

    command("topics", "list the topics: type, queues (over PETREL_GATEWAY, with PETREL_API_KEY)")
    command("groups", "list the consumer groups: retries, FIFO, subscriptions")
    command("lag", "how far behind a group is, per topic and queue").add_argument("group")
    p = command("peek", "the newest messages of a topic (or the first since --since), across its queues and brokers")
    p.add_argument("topic")
    p.add_argument("--key", help="only messages sent with this key (the key index)")
    p.add_argument(
        "--since",
        help="stored since then (RFC 3339 or epoch ms); without --key, the first --max since then, oldest first",
    )
    p.add_argument("--max", type=int, default=10, help="at most this many (default 10)")
    p = command("tail", "follow a topic's new messages (no group needed; Ctrl-C stops)")
    p.add_argument("topic")
    p.add_argument("--once", action="store_true", help="print what arrives within --wait, then stop")
    p.add_argument("--wait", type=float, default=2.0, help="how long each poll waits (seconds)")
    command("trace", "where a message is, and per group whether it was delivered, acked, retried").add_argument("id")
    p = command("dlq", "a group's dead letters")
    p.add_argument("group")
    p.add_argument("--redrive", action="store_true", help="send them back to the group (its retry topic)")
    p = command("status", "the processes `petrel up` started: port, health, memory")
    p.add_argument("--data-dir", default="data", help="petrel up's --data-dir (default data)")


def run(args: argparse.Namespace) -> int:
    try:
        if args.command == "status":
            found = local_status.status(args.data_dir, args.json)
        else:
            with GatewayCalls() as calls:
                found = RUNNERS[args.command](calls, args)
    except AdminError as exc:
        print(f"petrel {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `petrel lag billing | head -n 1`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if args.json and found is not None:
        try:
            print(json.dumps(found, indent=2))
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _quiet(args: argparse.Namespace) -> bool:
    return bool(args.json)


def topics(calls: GatewayCalls, args: argparse.Namespace) -> Any:
    found = calls.get("/v1/topics")
    if not _quiet(args):
        print(
            table([(t["topic"], t["message_type"], t["queues"]) for t in found["topics"]], ["TOPIC", "TYPE", "QUEUES"])
        )
    return found


def groups(calls: GatewayCalls, args: argparse.Namespace) -> Any:
    found = calls.get("/v1/groups")
    rows = [
        (
            g["name"],
            g["max_retries"],
            "yes" if g["fifo"] else "no",
            "yes" if g["broadcast"] else "no",
            ", ".join(s["topic"] for s in g.get("subscriptions", [])) or "-",
        )
        for g in found["groups"]
    ]
    if not _quiet(args):
        print(table(rows, ["GROUP", "MAX RETRIES", "FIFO", "BROADCAST", "SUBSCRIBES TO"]))
    return found


def lag(calls: GatewayCalls, args: argparse.Namespace) -> Any:
    found = calls.get(f"/v1/groups/{args.group}/lag")
    if not _quiet(args):
        per_topic: dict[str, list[int]] = {}
        for q in found["queues"]:
            totals = per_topic.setdefault(q["topic"], [0, 0])
            totals[0] += q["lag"]
            totals[1] += q["in_flight"]
        print(f"group {found['group']}: {found['total_lag']:,} behind, {found['total_in_flight']:,} in flight")
        print(table([(t, v[0], v[1]) for t, v in sorted(per_topic.items())], ["TOPIC", "LAG", "IN FLIGHT"]))
        print()
        rows = [
            (q["topic"], q["broker"], q["queue_id"], q["broker_offset"], q["consumer_offset"], q["lag"], q["in_flight"])
            for q in found["queues"]
        ]
        print(table(rows, ["TOPIC", "BROKER", "QUEUE", "BROKER OFFSET", "GROUP OFFSET", "LAG", "IN FLIGHT"]))
        if found.get("unavailable"):
            print(f"not answering: {', '.join(found['unavailable'])} (their queues are missing)")
    return found


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _body(message: dict[str, Any]) -> str:
    body = message.get("body")
    text = body if body is not None else f"(binary, {len(message.get('body_base64') or '') * 3 // 4} bytes)"
    return text if len(text) <= 60 else text[:57] + "..."


def _message_rows(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            m["message_id"],
            _when(m["stored_at"]),
            m["broker"],
            m["queue_id"],
            m["queue_offset"],
            " ".join(m["keys"]) or "-",
            _body(m),
        )
        for m in messages
    ]


MESSAGE_HEADERS = ["MESSAGE ID", "STORED (UTC)", "BROKER", "QUEUE", "OFFSET", "KEYS", "BODY"]


def _queues(calls: GatewayCalls, topic: str) -> dict[tuple[str, int], dict[str, Any]]:
    """Each readable queue, by (broker, queue id), with its min_offset and max_offset: the topic's answer holds them
    (a key that may read the topic gets them; a queue retention trimmed starts above 0)."""
    described = calls.get(f"/v1/topics/{topic}")
    return {(b["broker"], q["queue_id"]): q for b in described["brokers"] for q in b["queues"] if q["readable"]}


def _since(calls: GatewayCalls, topic: str, queues: list[tuple[str, int]], since: int) -> dict[tuple[str, int], Any]:
    """Each queue's offsets with its offset_for_timestamp: the first stored at or after `since` (ms)."""
    return {
        (broker, queue): calls.get(f"/v1/topics/{topic}/queues/{queue}/offsets", broker=broker, timestamp=since)
        for broker, queue in queues
    }


def _read(calls: GatewayCalls, topic: str, broker: str, queue: int, start: int, end: int) -> list[dict[str, Any]]:
    """The messages of one queue in [start, end), a page (at most 256, the gateway's limit) at a time."""
    messages: list[dict[str, Any]] = []
    while start < end:
        pulled = calls.get(
            f"/v1/topics/{topic}/queues/{queue}/messages", broker=broker, offset=start, max=min(end - start, 256)
        )
        messages += pulled["messages"]
        if pulled["next_offset"] <= start:
            break
        start = pulled["next_offset"]
    return messages


def peek(calls: GatewayCalls, args: argparse.Namespace) -> Any:
    since = parse_time_ms(args.since, "--since") if args.since else None
    if args.key is not None:
        found = calls.get(f"/v1/topics/{args.topic}/messages", key=args.key, begin=since, max=min(args.max, 64))
        messages = found["messages"]
    elif since is not None:  # the first --max stored since then, oldest first
        messages = []
        for (broker, queue), at in _since(calls, args.topic, list(_queues(calls, args.topic)), since).items():
            start = max(at["offset_for_timestamp"], at["min_offset"])
            messages += _read(calls, args.topic, broker, queue, start, min(at["max_offset"], start + args.max))
        messages = sorted(messages, key=lambda m: (m["stored_at"], m["broker"], m["queue_id"], m["queue_offset"]))
        messages = messages[: args.max]
    else:  # the newest --max, newest first
        messages = []
        for (broker, queue), at in _queues(calls, args.topic).items():
            end = at["max_offset"]
            messages += _read(calls, args.topic, broker, queue, max(at["min_offset"], end - args.max), end)
        messages = sorted(messages, key=lambda m: m["stored_at"], reverse=True)[: args.max]
    if not _quiet(args):
        print(table(_message_rows(messages), MESSAGE_HEADERS))
    return {"messages": messages}


def tail(calls: GatewayCalls, args: argparse.Namespace) -> Any:
    queues = _queues(calls, args.topic)
    cursors = {q: at["max_offset"] for q, at in queues.items()}
    seen: list[dict[str, Any]] = []
    if not _quiet(args):
        print(f"following {args.topic} ({len(queues)} queues) from now; Ctrl-C stops", flush=True)
    stop = threading.Event()
    while not stop.is_set():
        arrived = []
        for (broker, queue), offset in cursors.items():
            pulled = calls.get(
                f"/v1/topics/{args.topic}/queues/{queue}/messages",
                broker=broker,
                offset=offset,
                max=64,
                wait_ms=int(args.wait * 1000 / max(1, len(cursors))),
            )
            cursors[(broker, queue)] = pulled["next_offset"]
            arrived += pulled["messages"]
        arrived.sort(key=lambda m: m["stored_at"])
        seen += arrived
        if not _quiet(args):
            for row in _message_rows(arrived):
                print("  ".join(str(v) for v in row), flush=True)
        if args.once:
            stop.set()
    return {"messages": seen}


def trace(calls: GatewayCalls, args: argparse.Namespace) -> Any:
    found = calls.get(f"/v1/messages/{args.id}/trace")
    if not _quiet(args):
        stored = found["stored"]
        print(f"message {found['message_id']} in {found['topic']}, key {found['key'] or '-'}")
        print(
            f"stored on {stored['broker']} queue {stored['queue']} offset {stored['queue_offset']}"
            f" at {found['stored_at']}"
        )
        if found["scheduled"]:
            print(f"scheduled: {found['scheduled']['state']}, due {found['scheduled']['due_at']}")
        if found["transaction"]:
            print(f"transaction: {found['transaction']['state']}")
        rows = [
            (
                g["group"],
                g["state"],
                g["attempts"],
                g["leases_in_flight"],
                g["consumer_offset"],
                len(g["retries"]),
                g["dead_letter"]["topic"] if g["dead_letter"] else "-",
            )
            for g in found["groups"]
        ]
        print(table(rows, ["GROUP", "STATE", "ATTEMPTS", "LEASED", "GROUP OFFSET", "RETRY COPIES", "DEAD LETTER"]))
        for p in found["push"]:
            print(f"push {p['group']}/{p['subscription']}: {p['attempts']} attempts, last {p['last_status']}")
        print("steps:")
        for step in found["steps"]:
            print(f"  {step['at'] or '':<32} {step['group'] or '':<12} {step['detail']}")
    return found


def dlq(calls: GatewayCalls, args: argparse.Namespace) -> Any:
    if args.redrive:
        found = calls.post(f"/v1/groups/{args.group}/dlq:redrive", {})
        if not _quiet(args):
            print(f"redriven {found['redriven']}, still in the DLQ {found['remaining']}")
        return found
    found = calls.get(f"/v1/groups/{args.group}/dlq")
    if not _quiet(args):
        rows = [
            (m["message_id"], _when(m["dead_lettered_at"]), m["original_topic"], m["attempts"], m.get("reason") or "-")
            for m in found["messages"]
        ]
        print(table(rows, ["MESSAGE ID", "DEAD-LETTERED (UTC)", "TOPIC", "ATTEMPTS", "REASON"]))
    return found


RUNNERS: dict[str, Command] = {
    "topics": topics,
    "groups": groups,
    "lag": lag,
    "peek": peek,
    "tail": tail,
    "trace": trace,
    "dlq": dlq,
}
