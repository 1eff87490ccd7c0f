"""Charts of the metrics dashboard: one time series per combination over 5-minute buckets,
as data for the vendored uPlot (``static/console/charts.js``: axes with units and ticks, hover
values) and as the table a browser without JavaScript shows instead."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Chart:
    key: str  # names its elements: chart-<key>, chart-<key>-data
    title: str
    unit: str  # "%" or a count's unit, shown on the y axis and in the table
    span: tuple[datetime, datetime]  # the range shown, whatever times have data
    times: list[datetime]
    series: list[tuple[str, list[float | None]]]  # (combination, a value per time or None)

    def data(self) -> dict[str, Any]:
        """What charts.js draws: the range and the times in epoch seconds, one list of values
        per series."""
        return {
            "unit": self.unit,
            "start": int(self.span[0].timestamp()),
            "end": int(self.span[1].timestamp()),
            "times": [int(t.timestamp()) for t in self.times],
            "series": [{"label": label, "values": values} for label, values in self.series],
        }

    def rows(self) -> list[tuple[datetime, list[float | None]]]:
        """The table: a row per time, a value per series."""
        return [
            (time, [values[i] for _label, values in self.series])
            for i, time in enumerate(self.times)
        ]

    @property
    def data_id(self) -> str:
        return f"chart-{self.key}-data"

    @property
    def points(self) -> int:
        return len(self.times)


def time_chart(
    key: str,
    title: str,
    unit: str,
    span: tuple[datetime, datetime],
    times: list[datetime],
    values: dict[str, list[float | None]],
) -> Chart:
    """A chart of ``values`` over ``span`` (one list per series, aligned with ``times``; None:
    no data)."""
    return Chart(key, title, unit, span, times, list(values.items()))
