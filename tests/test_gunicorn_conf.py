"""The web server's production settings (``console/gunicorn_conf.py``), which the command
``gunicorn -c python:console.gunicorn_conf console.wsgi:application`` takes whole."""

from __future__ import annotations

import importlib
import os

from django.conf import settings

from console import gunicorn_conf


def test_a_request_is_answered_before_its_worker_is_killed():
    # The database budget leaves room for the answer below gunicorn's worker timeout.
    assert gunicorn_conf.timeout * 1000 >= settings.DATABASE_REQUEST_BUDGET_MS + 5_000


def test_workers_are_twice_the_cores_plus_one(monkeypatch):
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    assert importlib.reload(gunicorn_conf).workers == 2 * len(os.sched_getaffinity(0)) + 1


def test_web_concurrency_sets_the_workers(monkeypatch):
    monkeypatch.setenv("WEB_CONCURRENCY", "3")
    try:
        assert importlib.reload(gunicorn_conf).workers == 3
    finally:
        monkeypatch.delenv("WEB_CONCURRENCY")
        importlib.reload(gunicorn_conf)


def test_it_listens_on_every_address_and_logs_requests_to_standard_output():
    assert gunicorn_conf.bind == ["0.0.0.0:8000"]
    assert gunicorn_conf.accesslog == "-"
