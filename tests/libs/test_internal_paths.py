"""internal_path: a name travels to an internal service as itself, whatever it holds (issue 25, finding 1)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from libs.broker_api.client import BrokerClient
from libs.broker_api.nameservers import NameserverClient
from libs.errors import TopicNotFound
from libs.http.client import InternalClient
from libs.http.paths import internal_path
from libs.topic import TopicConfig
from tests.support.serving import ServedApp
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("libs", "services", "gateway", "deploy", "bench")
SYSTEM_NAMES = ("%DLQ%abc", "%RETRY%ab-cd", "%DLQ%2F", "%RETRY%%41%", "SCHEDULE_TOPIC_XXXX")
"""A `%` followed by hex digits (`%ab`, `%2F`, `%41`) is what a second decoding would turn into something else."""


def test_every_segment_is_quoted_whole() -> None:
    path = internal_path("/internal/groups/{group}/topics/{topic}/offsets:reset", group="a/b?c#d", topic="%DLQ%ab")

    assert path == "/internal/groups/a%2Fb%3Fc%23d/topics/%25DLQ%25ab/offsets:reset"
    assert internal_path("/internal/topics/{topic}/queues/{queue_id}", topic="\uff50\uff41\uff59", queue_id=3) == (
        "/internal/topics/%EF%BD%90%EF%BD%81%EF%BD%99/queues/3"
    )


@pytest.mark.parametrize("segment", ["", ".", ".."])
def test_a_segment_that_is_no_name_is_refused(segment: str) -> None:
    with pytest.raises(ValueError, match="cannot be a path segment"):
        internal_path("/internal/topics/{topic}", topic=segment)


@pytest.mark.parametrize("name", SYSTEM_NAMES)
async def test_a_system_topic_reaches_the_broker_and_the_nameserver_as_itself(
    broker: ServedApp, nameserver: ServedApp, name: str
) -> None:
    async with InternalClient() as internal:  # over TCP to uvicorn, which decodes the path once
        brokers = BrokerClient(internal)
        stored = await brokers.change_topic(
            "broker-a", broker.address, name, queues=1, message_type=None, created_as=TopicConfig(name, 1, 1)
        )
        described = await brokers.get_topic("broker-a", broker.address, name)
        names = NameserverClient(internal, [nameserver.address])

        async def routed() -> bool:
            try:
                return (await names.route(name)).topic == name
            except TopicNotFound:
                return False

        await eventually(routed, f"the nameserver routes {name!r} (the broker registers it)")

    assert (stored.topic, described.topic) == (name, name)


def hand_built_paths(tree: ast.AST) -> list[int]:
    """Lines that put a value into an internal path without internal_path: an f-string or `*_PATH.format(...)`."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # a value after `/internal/` (a host before it is no name)
            path = False
            for value in node.values:
                path = path or (isinstance(value, ast.Constant) and "/internal/" in str(value.value))
                if path and isinstance(value, ast.FormattedValue):
                    lines.append(node.lineno)
                    break
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
            target = node.func.value
            if isinstance(target, ast.Name) and target.id.endswith("_PATH"):
                lines.append(node.lineno)
    return lines


def test_no_internal_path_is_built_by_hand() -> None:
    found = {
        f"{path.relative_to(ROOT)}:{line}"
        for folder in SOURCES
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line in hand_built_paths(ast.parse(path.read_text(), str(path)))
    }
    assert found == set(), f"build these paths with libs.http.paths.internal_path: {sorted(found)}"
