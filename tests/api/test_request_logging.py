"""API 4xx answers are the caller's: logged at INFO without the query string, not as
warnings; and no request is logged with its query string (ledger.log_filters)."""

from __future__ import annotations

import logging

import pytest
from django.conf import settings
from pythonjsonlogger.json import JsonFormatter

from tests.api.conftest import ApiClient
from tests.console.conftest import make_user, signed_in


def _request_log(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int]]:
    return [
        (r.levelname, getattr(r, "status_code", 0))
        for r in caplog.records
        if r.name == "django.request"
    ]


def _duplicate(api: ApiClient) -> None:
    api.start_run()
    first = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1")
    assert first.json()["decision"] == "execute"
    again = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1")
    assert again.status_code == 409 and again.json()["decision"] == "wait"


def test_a_wait_is_logged_at_info(api: ApiClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="django.request"):
        _duplicate(api)
    assert _request_log(caplog) == [("INFO", 409)]


def test_a_wait_is_not_logged_at_the_default_warning_level(
    api: ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="django.request"):
        _duplicate(api)
    assert _request_log(caplog) == []


def test_every_api_client_error_is_logged_at_info_without_its_query_string(
    api: ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="django.request"):
        missing = api.get("/calls/00000000-0000-0000-0000-000000000000")
        unknown = api.get("/records?key=agent:acme:user-7:secret-business-id")
    assert missing.status_code == 404 and unknown.status_code == 404
    assert _request_log(caplog) == [("INFO", 404), ("INFO", 404)]
    logged = " ".join(f"{r.getMessage()} {getattr(r, 'request', '')}" for r in caplog.records)
    assert "secret-business-id" not in logged and "GET /api/v1/records" in logged


def test_a_console_refusal_is_logged_without_its_query_string(
    django_user_model, tenant, caplog: pytest.LogCaptureFixture
) -> None:
    """As the log writes it: the project's JSON formatter writes a record's extras, the
    request among them."""
    operator = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    with caplog.at_level(logging.INFO, logger="django.request"):
        refused = operator.get("/approvals/?key=agent:acme:user-7:secret-business-id", secure=True)
    assert refused.status_code == 403
    formatter = JsonFormatter(
        **{k: v for k, v in settings.LOGGING["formatters"]["json"].items() if k != "()"}
    )
    logged = [formatter.format(r) for r in caplog.records if r.name == "django.request"]
    assert len(logged) == 1 and "GET /approvals/" in logged[0]
    assert "secret-business-id" not in logged[0]
