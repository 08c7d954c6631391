"""EndedTransactions: memory holds the newest outcomes only; older ones are read back from disk."""

from __future__ import annotations

from services.broker.ended_transactions import EndedTransactions


def test_memory_holds_at_most_the_bound_and_older_outcomes_are_read_back() -> None:
    on_disk: dict[str, str] = {}
    asked: list[str] = []

    def recorded(message_id: str) -> str | None:
        asked.append(message_id)
        return on_disk.get(message_id)

    ended: EndedTransactions[str] = EndedTransactions(recorded, kept=3)
    for index in range(1000):
        on_disk[f"TX{index}"] = "COMMIT"
        ended[f"TX{index}"] = "COMMIT"
        assert len(ended) <= 3

    assert ended.get("TX999") == "COMMIT"
    assert asked == [], "a recent outcome is answered from memory"
    assert ended.get("TX0") == "COMMIT", "an old outcome is read back from disk"
    assert "TX0" in ended
    assert "NEVER" not in ended


def test_outcomes_without_a_key_on_disk_stay_whatever_the_bound() -> None:
    ended: EndedTransactions[str] = EndedTransactions(lambda _: None, kept=1)
    ended.keep_for_ever("LEGACY", "ROLLBACK")
    for index in range(10):
        ended[f"TX{index}"] = "COMMIT"
    assert ended.get("LEGACY") == "ROLLBACK"
    assert ended.get("TX0") is None
    assert len(ended) == 2
