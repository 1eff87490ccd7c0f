"""Fixtures shared by the record transitions' tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ledger.signals import records_became_unknown


@pytest.fixture
def announced() -> Iterator[list[list[int]]]:
    """The record ids announced for an automatic look-up while the test runs."""
    seen: list[list[int]] = []

    def receiver(sender: object, record_ids: list[int], **kwargs: Any) -> None:
        seen.append(list(record_ids))

    records_became_unknown.connect(receiver, weak=False)
    try:
        yield seen
    finally:
        records_became_unknown.disconnect(receiver)
