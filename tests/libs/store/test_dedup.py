"""De-duplicating puts: a record carrying a DEDUP token is stored once per message id, topic and token."""

from __future__ import annotations

from libs.message import Prop
from tests.support.store import T0_MS, Stores, pull_all, record, stored

ID = f"{T0_MS:012X}9829373C3E9B000000AA"
"""A message id made at the store's (fake) time."""


def copy(topic: str, token: str | None, body: bytes = b"body") -> bytes:
    properties = {} if token is None else {Prop.DEDUP: token}
    return record(topic, 0, body, msg_id=ID, properties=properties)


async def test_a_put_with_the_same_id_topic_and_token_answers_the_stored_copy(stores: Stores) -> None:
    store = stores.open()
    (first,) = stored(await store.put_reporting(copy("T", "due:1:0"), dedupe=True))
    (again,) = stored(await store.put_reporting(copy("T", "due:1:0", b"again"), dedupe=True))

    assert (first.duplicate, again.duplicate) == (False, True)
    assert (again.queue_offset, again.physical_offset, again.size) == (0, first.physical_offset, first.size)
    assert again.store_timestamp == first.store_timestamp
    assert pull_all(store, "T", 0) == [b"body"]


async def test_another_token_topic_or_no_token_is_stored_again(stores: Stores) -> None:
    store = stores.open()
    await store.put_reporting(copy("T", "due:1:0"), dedupe=True)
    others = [copy("T", "due:2:1"), copy("U", "due:1:0"), copy("T", None), copy("T", None)]
    results = [r for raw in others for r in stored(await store.put_reporting(raw, dedupe=True))]

    assert [r.duplicate for r in results] == [False] * 4
    assert len(pull_all(store, "T", 0)) == 4
    assert len(pull_all(store, "U", 0)) == 1


async def test_the_stored_copy_is_found_behind_many_copies_of_the_message(stores: Stores) -> None:
    """A message retried many times has a copy per attempt; the first one's token still matches."""
    store = stores.open()
    for attempt in range(300):
        await store.put_reporting(copy("T", f"billing:0:{attempt}"), dedupe=True)

    (again,) = stored(await store.put_reporting(copy("T", "billing:0:0"), dedupe=True))

    assert (again.duplicate, again.queue_offset) == (True, 0)
    assert len(pull_all(store, "T", 0)) == 300
