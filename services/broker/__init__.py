"""The broker: topics, and (next) CommitLog, ConsumeQueue, IndexFile, offsets and leases."""
