"""Shared fixtures. The suite runs against real PostgreSQL (``make test`` sets it up)."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.factories import make_tenant, make_tool


def pytest_sessionstart(session: pytest.Session) -> None:
    if connection.vendor != "postgresql":
        pytest.exit(
            "The test suite needs PostgreSQL: run it with `make test` (or set DATABASE_URL).",
            returncode=2,
        )


@pytest.fixture
def tenant(db):
    return make_tenant("acme")


@pytest.fixture
def other_tenant(db):
    return make_tenant("globex")


@pytest.fixture
def create_order(tenant):
    return make_tool(tenant, "create_order")


@pytest.fixture
def read_file(tenant):
    return make_tool(tenant, "read_file")
