"""What Petrel's Celery apps (txcheck's, the nightly ETL's) share: tasks in JSON only, and so no root warning.

Celery warns (`SecurityWarning`) when a worker runs as root: a root worker that accepts pickle runs whatever code
anyone who can write to its Redis sends. Petrel's workers accept JSON only (`JSON_ONLY`), which Celery itself treats
as the case where root is allowed; `quiet_root_warning` then silences the warning, and only then. Run Petrel as an
ordinary user all the same (docs/operations.md): nothing in it needs root.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any, Final

from celery.exceptions import SecurityWarning

JSON_ONLY: Final[dict[str, Any]] = {
    "accept_content": ["json"],
    "task_serializer": "json",
    "result_accept_content": ["json"],
    "result_serializer": "json",
}


def quiet_root_warning(accept_content: Iterable[str]) -> bool:
    """Silence Celery's warning about root in this process when its app accepts JSON only; True when it did."""
    if set(accept_content) != {"json"}:
        return False
    warnings.filterwarnings("ignore", category=SecurityWarning)
    return True
