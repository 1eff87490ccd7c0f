"""A private Redis broker for the worker tests, wired into this process's Celery app too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from console.celery import app as celery_app
from tests.processes import RedisServer, redis_server


def _reset_pools() -> None:
    celery_app._pool = None
    if "amqp" in celery_app.__dict__:
        celery_app.amqp._producer_pool = None


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as redis:
        # Celery prefers the CELERY_BROKER_URL environment variable over its configuration.
        monkeypatch.setenv("CELERY_BROKER_URL", redis.url)
        _reset_pools()
        try:
            yield redis
        finally:
            monkeypatch.undo()
            _reset_pools()
