"""The broker's storage engine: CommitLog, ConsumeQueue, IndexFile, flush, recovery, retention."""
