"""Moved to `libs.broker_api.schemas`; kept only until the gateway imports it from there (issue 11)."""

from libs.broker_api.schemas import BrokerTopic as BrokerTopic  # noqa: PLC0414
from libs.broker_api.schemas import PutAnswer as PutAnswer  # noqa: PLC0414
from libs.broker_api.schemas import PutEntry as PutEntry  # noqa: PLC0414
from libs.broker_api.schemas import PutFailure as PutFailure  # noqa: PLC0414
