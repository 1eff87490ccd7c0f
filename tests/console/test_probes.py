"""The probes answer an orchestrator that asks by the process's own address over plain HTTP
(a kubelet's pod address, a compose healthcheck's 127.0.0.1), under production settings that
refuse such a host and redirect plain HTTP; every other request is still held to both."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

PRODUCTION = {"ALLOWED_HOSTS": ["ledger.example.com"], "SECURE_SSL_REDIRECT": True}


@pytest.fixture
def production(settings):
    for name, value in PRODUCTION.items():
        setattr(settings, name, value)


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_a_probe_by_the_process_address_is_answered(production, path):
    response = Client().get(path, HTTP_HOST="10.89.0.7:8000")
    assert response.status_code == 200, response.content
    assert response.json()["status"] in {"ok", "ready", "degraded"}


def test_readyz_by_the_process_address_still_reports_the_database(production):
    assert Client().get("/readyz", HTTP_HOST="127.0.0.1:8000").json()["checks"]["database"] == "ok"


def test_a_page_by_an_unknown_host_is_still_refused(production):
    assert Client().get("/login/", HTTP_HOST="10.89.0.7:8000").status_code == 400


def test_a_page_over_plain_http_is_still_redirected(production):
    response = Client().get("/login/", HTTP_HOST="ledger.example.com")
    assert response.status_code == 301
    assert response["Location"] == "https://ledger.example.com/login/"


def test_a_probe_path_posted_to_is_not_a_probe(production):
    assert Client().post("/healthz", HTTP_HOST="10.89.0.7:8000").status_code == 400
