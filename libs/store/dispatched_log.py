"""DispatchedLog: the store's files as its helpers type them, the CommitLog and what was dispatched from it.

The helpers of libs.store (batch_append, retention, replica) take the store as a Protocol
of just what they use, so none imports libs.store.message_store. What they all use is
this: the config, the log, and the ConsumeQueues and the index built from it. Each adds
what else it needs to its own Protocol.
"""

from __future__ import annotations

from typing import Protocol

from libs.store.commitlog import CommitLog
from libs.store.config import StoreConfig
from libs.store.index_service import IndexService
from libs.store.queue_table import ConsumeQueueTable


class DispatchedLog(Protocol):
    """The log, what was dispatched from it (ConsumeQueues, index), and the config naming their files."""

    @property
    def config(self) -> StoreConfig: ...
    @property
    def commitlog(self) -> CommitLog: ...
    @property
    def queues(self) -> ConsumeQueueTable: ...
    @property
    def index(self) -> IndexService: ...
