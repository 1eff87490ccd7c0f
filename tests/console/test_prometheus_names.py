"""The families /metrics exports are the ones docs/runbook.md lists, with their types, under
Prometheus's naming conventions (base units, 0-1 ``_ratio``, ``_total`` on counters); the
runbook's example alerts name only families that exist."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.processes import ROOT

pytestmark = pytest.mark.django_db

TOKEN = "scrape-secret"
RUNBOOK = ROOT / "docs" / "runbook.md"
#: Units that are not Prometheus's base units, and a rate that is not named a ratio.
NOT_BASE_UNITS = re.compile(r"_(bp|percent|rate|ms|milliseconds|minutes|hours|days)(_|$)")


def _runbook_section() -> str:
    text = RUNBOOK.read_text()
    start = text.index("## Metrics for Prometheus")
    return text[start : text.index("\n## ", start + 1)]


def _documented() -> dict[str, str]:
    """The families of the runbook's table: exposed name -> type."""
    rows = re.findall(r"^\| `(agent_ledger_\w+)` \| (counter|gauge) \|", _runbook_section(), re.M)
    return dict(rows)


def _exported(settings) -> dict[str, str]:
    settings.METRICS_TOKEN = TOKEN
    response = Client().get("/metrics", secure=True, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    return {
        # A counter family's samples carry ``_total``; the parser names the family without it.
        f"{family.name}_total" if family.type == "counter" else family.name: family.type
        for family in text_string_to_metric_families(response.content.decode())
    }


def test_the_runbook_lists_every_family_exported_with_its_type(settings) -> None:
    assert _exported(settings) == _documented()


def test_names_are_in_base_units_and_ratios() -> None:
    documented = _documented()
    assert [name for name in documented if NOT_BASE_UNITS.search(name)] == []
    assert all(name.endswith("_total") == (kind == "counter") for name, kind in documented.items())


def test_the_example_alerts_name_documented_families() -> None:
    rules = _runbook_section().split("```yaml", 1)[1].split("```", 1)[0]
    named = set(re.findall(r"agent_ledger_\w+", rules))
    assert named and named <= set(_documented())
