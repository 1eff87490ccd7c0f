"""The wait between tries of a look-up or a delivery: doubling from a base, capped."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ledger.clock import backoff


@pytest.mark.parametrize(
    ("attempts", "seconds"),
    [(0, 5), (1, 5), (2, 10), (3, 20), (4, 40), (7, 320), (8, 600), (50, 600)],
)
def test_the_wait_doubles_after_each_failure_up_to_its_cap(attempts: int, seconds: int) -> None:
    assert backoff(attempts, base_seconds=5, cap_seconds=600) == timedelta(seconds=seconds)


def test_a_huge_number_of_attempts_waits_the_cap() -> None:
    assert backoff(10_000, base_seconds=30.0, cap_seconds=3600) == timedelta(seconds=3600)
