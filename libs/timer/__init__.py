"""Storage of the timer service's exact-time delivery: a TimerLog and a TimerWheel (RocketMQ 5's timer store).

Exceptions: `CorruptTimerLog` and `CorruptTimerWheel`, plain Exceptions that stop
the service at startup; `ValueError` from `TimerStore.enqueue` for a delay over
`max_delay_ms` (callers validate first).
"""

from libs.timer.models import Action, MessageRef, TimerEntry, TimerStats
from libs.timer.timer_log import CorruptTimerLog, TimerLog, TimerRecord
from libs.timer.timer_store import TimerStore
from libs.timer.timer_wheel import CorruptTimerWheel, TimerWheel

__all__ = [
    "Action",
    "CorruptTimerLog",
    "CorruptTimerWheel",
    "MessageRef",
    "TimerEntry",
    "TimerLog",
    "TimerRecord",
    "TimerStats",
    "TimerStore",
    "TimerWheel",
]
