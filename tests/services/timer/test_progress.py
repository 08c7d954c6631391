from pathlib import Path

from services.timer.progress import TimerProgress


def test_cursors_broker_ids_and_cancellations_survive_a_restart(tmp_path: Path) -> None:
    progress = TimerProgress(tmp_path / "progress.json")
    progress.cursors("broker-a").levels[2] = 17
    progress.cursors("broker-b").timer = 5
    progress.cancelled.add(("broker-a", 4096))
    progress.save()

    again = TimerProgress(tmp_path / "progress.json")
    again.load()

    assert again.cursors("broker-a").levels == {2: 17}
    assert again.cursors("broker-b").timer == 5
    assert (again.cursors("broker-a").store_id, again.cursors("broker-b").store_id) == (0, 1)
    assert again.broker_of(1) == "broker-b"
    assert again.cancelled == {("broker-a", 4096)}
    assert again.cursors("broker-c").store_id == 2, "a new broker gets a new id, never a reused one"


def test_a_fresh_timer_starts_at_the_beginning(tmp_path: Path) -> None:
    progress = TimerProgress(tmp_path / "progress.json")
    progress.load()
    assert progress.brokers == {}
    assert progress.cursors("broker-a").levels == {}
    assert not (tmp_path / "progress.tmp").exists()
