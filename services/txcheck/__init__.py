"""txcheck: transaction check-backs driven by Celery (the health process; Celery joins with transactions)."""
