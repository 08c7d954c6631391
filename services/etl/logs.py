"""How an ETL process logs: `petrel etl`, the spark-submit driver (`job.main`) and `python -m services.etl now`."""

from __future__ import annotations

import logging


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO is every gateway call
