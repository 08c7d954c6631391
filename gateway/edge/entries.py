"""Per-entry answers of a batch: an entry that failed says why as a problem (libs.problem.entry_problem)."""

from __future__ import annotations

from typing import Any

from gateway.messages.schemas import EntryError, SendResult
from libs.errors import FlushTimeout, PetrelError
from libs.problem import entry_problem


def entry_error(exc: PetrelError) -> EntryError:
    """A batch entry's error; a flush timeout also says where the message is stored."""
    stored = SendResult.model_validate(exc.extensions) if isinstance(exc, FlushTimeout) else None
    return EntryError(**entry_problem(exc), stored=stored)


def failed_handle(handle: str, exc: PetrelError) -> dict[str, Any]:
    """A receipt handle's HandleResult fields, when its ack or nack did not take effect."""
    return {"receipt_handle": handle, "ok": False, "error": entry_problem(exc)}
