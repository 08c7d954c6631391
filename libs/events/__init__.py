"""Message lifecycle events: the contract (`contract`) and the JSON-lines writer (`writer`)."""

from libs.events.contract import EVENTS, EventSpec
from libs.events.writer import EventWriter

__all__ = ["EVENTS", "EventSpec", "EventWriter"]
