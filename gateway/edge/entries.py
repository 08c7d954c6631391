"""Per-entry answers of a batch: an entry that failed says why as a problem (libs.problem.entry_problem)."""

from __future__ import annotations

from typing import Any

from gateway.messages.schemas import EntryError, SendResult
from libs.errors import FlushTimeout, PetrelError
from libs.problem import entry_problem


def entry_error(exc: PetrelError) -> EntryError:
    """A batch entry's error; one that may have been stored (a flush timeout, a refusal after the append) also says
    where."""
    placed = isinstance(exc, FlushTimeout) or (exc.extensions.get("maybe_stored") and "message_id" in exc.extensions)
    stored = SendResult.model_validate(exc.extensions) if placed else None
    maybe_stored = True if exc.extensions.get("maybe_stored") else None
    return EntryError(**entry_problem(exc), maybe_stored=maybe_stored, stored=stored)


def failed_handle(handle: str, exc: PetrelError) -> dict[str, Any]:
    """A receipt handle's HandleResult fields, when its ack or nack did not take effect."""
    return {"receipt_handle": handle, "ok": False, "error": entry_problem(exc)}
