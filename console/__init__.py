"""Project package: settings, URLs, the Celery app and the operator console."""

from console.celery import app as celery_app

__all__ = ["celery_app"]
