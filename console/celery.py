"""The Celery application. Settings are read from Django settings prefixed ``CELERY_``."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, Task
from celery.signals import task_postrun, task_prerun
from django.db import close_old_connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("agent_ledger")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def _database_connections(task: Task | None = None, **_: Any) -> None:
    """Around every task, what Django does around every request: a connection past
    ``CONN_MAX_AGE`` or broken by an error is closed, and the next query checks the connection
    is alive (``CONN_HEALTH_CHECKS``) before relying on it. Celery's own Django fixup would close
    the connection before and after every task instead (see ``CELERY_DB_REUSE_MAX``): a new
    PostgreSQL connection for every look-up, which capped a worker's look-ups and kept a second
    worker from adding any (docs/performance.md). Eager tasks run inside the caller's
    transaction, so they are left alone, as the fixup leaves them."""
    if task is not None and not getattr(task.request, "is_eager", False):
        close_old_connections()
