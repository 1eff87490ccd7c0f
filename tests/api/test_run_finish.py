"""POST /runs/{run_id}/finish: a run ends once, with a reason stored redacted."""

from __future__ import annotations

import pytest

from ledger.models import Run
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db

#: A reason as long as the column, ending with a secret shorter than the marker replacing it.
LONG_REASON = "x" * 190 + " pwd: k9"


def test_a_reason_is_stored_redacted_and_within_its_column(api: ApiClient) -> None:
    api.start_run()
    finished = api.post("/runs/run-1/finish", {"termination_reason": LONG_REASON})
    assert finished.status_code == 200, finished.content
    stored = Run.objects.get(run_id="run-1").termination_reason
    assert stored == ("x" * 190 + " pwd: [REDACTED]")[:200]
    assert finished.json()["termination_reason"] == stored


def test_finishing_again_with_the_same_reason_is_harmless(api: ApiClient) -> None:
    api.start_run()
    for _ in range(2):
        again = api.post("/runs/run-1/finish", {"termination_reason": LONG_REASON})
        assert again.status_code == 200, again.content
