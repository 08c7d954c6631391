"""PutCoalescer with a master check: a put left unanswered by a master that another broker replaced is given up."""

import asyncio

from libs.broker_api.coalescing import PutCoalescer, master_replaced
from libs.broker_api.schemas import PutEntry
from libs.errors import BrokerUnavailable, PetrelError
from tests.support.put_broker import Broker

QUICK_S = 0.01


class Nameservers:
    """What the master check reads: whether another broker is master now; counts the questions."""

    def __init__(self) -> None:
        self.replaced = False
        self.asked = 0
        self.asked_twice = asyncio.Event()

    async def check(self) -> bool:
        self.asked += 1
        if self.asked >= 2:
            self.asked_twice.set()
        return self.replaced


async def test_callers_of_a_put_to_a_replaced_master_stop_waiting_and_are_told_it_may_be_stored() -> None:
    broker, nameservers = Broker(), Nameservers()
    broker.release.clear()  # SIGSTOPped: the put is never answered
    coalescer = PutCoalescer(
        broker.put,
        max_in_flight=1,
        broker="broker-a",
        replaced=nameservers.check,
        stall_check_s=QUICK_S,
        stall_recheck_s=QUICK_S,
    )

    in_flight = asyncio.ensure_future(coalescer.submit(b"a", 1))
    await asyncio.sleep(0)  # (one loop turn: the put goes out)
    queued = asyncio.ensure_future(coalescer.submit(b"b", 1))
    await nameservers.asked_twice.wait()  # asked, not replaced yet: still waiting
    assert not in_flight.done()
    assert not queued.done()
    nameservers.replaced = True

    (sent,) = await in_flight
    (not_sent,) = await queued

    assert isinstance(sent, BrokerUnavailable)
    assert master_replaced(sent)
    assert sent.extensions["maybe_stored"]
    assert isinstance(not_sent, BrokerUnavailable)
    assert master_replaced(not_sent)
    assert not not_sent.extensions.get("maybe_stored")
    assert broker.puts == [b"a"]  # the queued record never went to the stopped master
    assert coalescer.was_replaced
    assert coalescer.queued_bytes == 0


async def test_a_slow_put_whose_master_is_still_the_master_is_waited_for() -> None:
    broker, nameservers = Broker(), Nameservers()
    broker.release.clear()  # a slow disk, say
    coalescer = PutCoalescer(
        broker.put, broker="broker-a", replaced=nameservers.check, stall_check_s=QUICK_S, stall_recheck_s=QUICK_S
    )

    sending = asyncio.ensure_future(coalescer.submit(b"a", 1))
    await nameservers.asked_twice.wait()
    broker.release.set()
    (stored,) = await sending

    assert isinstance(stored, PutEntry)
    assert stored.queue_offset == 0
    assert not coalescer.was_replaced


async def test_the_nameservers_unreachable_too_the_put_is_waited_for() -> None:
    broker = Broker()
    broker.release.clear()
    asked = asyncio.Event()

    async def unreachable() -> bool:
        asked.set()
        raise PetrelError("no nameserver answers")

    coalescer = PutCoalescer(
        broker.put, broker="broker-a", replaced=unreachable, stall_check_s=QUICK_S, stall_recheck_s=QUICK_S
    )
    sending = asyncio.ensure_future(coalescer.submit(b"a", 1))
    await asked.wait()
    broker.release.set()
    (stored,) = await sending

    assert isinstance(stored, PutEntry)


async def test_a_caller_gone_before_its_put_went_out_sends_nothing() -> None:
    broker = Broker()
    broker.release.clear()
    coalescer = PutCoalescer(broker.put, max_in_flight=1)
    first = asyncio.ensure_future(coalescer.submit(b"a", 1))
    await asyncio.sleep(0)
    gone = asyncio.ensure_future(coalescer.submit(b"bb", 2))
    await asyncio.sleep(0)
    assert coalescer.queued_bytes == 2

    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    broker.release.set()
    await first

    assert coalescer.queued_bytes == 0
    assert broker.puts == [b"a"]
