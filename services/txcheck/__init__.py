"""txcheck: transaction check-backs driven by Celery (a health process, a Celery worker and beat; see celery_app)."""
