"""Charts of the metrics dashboard: one time series per combination over 5-minute buckets,
as data for the vendored uPlot (``static/console/charts.js``: axes with units and ticks, hover
values, a dashed line per threshold on the metric) and as the table a browser without
JavaScript shows instead."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils.translation import gettext as _

from ledger.models import Threshold


@dataclass(frozen=True)
class Chart:
    key: str  # names its elements: chart-<key>, chart-<key>-data
    title: str
    unit: str  # "%" or a count's unit, shown on the y axis and in the table
    span: tuple[datetime, datetime]  # the range shown, whatever times have data
    times: list[datetime]
    series: list[tuple[str, list[float | None]]]  # (combination, a value per time or None)
    limits: list[tuple[float, str]] = field(default_factory=list)  # (value in unit, its label)

    def data(self) -> dict[str, Any]:
        """What charts.js draws: the range and the times in epoch seconds, one list of values
        per series."""
        return {
            "unit": self.unit,
            "start": int(self.span[0].timestamp()),
            "end": int(self.span[1].timestamp()),
            "times": [int(t.timestamp()) for t in self.times],
            "series": [{"label": label, "values": values} for label, values in self.series],
            "limits": [{"value": value, "label": label} for value, label in self.limits],
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
    limits: list[tuple[float, str]] | None = None,
) -> Chart:
    """A chart of ``values`` over ``span`` (one list per series, aligned with ``times``; None:
    no data), with a line at each of ``limits``."""
    return Chart(key, title, unit, span, times, list(values.items()), limits or [])


#: The metrics that are rates between 0 and 1, shown as percentages; the others are counts.
RATES = frozenset({Threshold.Metric.DEDUP_HIT_RATE.value})


def threshold_limits(thresholds: Iterable[Threshold]) -> dict[str, list[tuple[float, str]]]:
    """The enabled thresholds as lines on their metric's chart, in the chart's unit (a rate's
    limit in percent), each labelled with what crossing it does and over which window: the
    charts plot 5-minute or hourly buckets, the threshold judges its whole window."""
    limits: dict[str, list[tuple[float, str]]] = {}
    for threshold in thresholds:
        if not threshold.enabled:
            continue
        rate = threshold.metric in RATES
        value = round(threshold.above * 100, 4) if rate else threshold.above
        shown = {
            "value": f"{value:g}%" if rate else f"{value:g}",
            "window": threshold.window_minutes,
        }
        if threshold.action == Threshold.Action.HALT:
            label = _("halts above %(value)s over %(window)d min") % shown
        else:
            label = _("alerts above %(value)s over %(window)d min") % shown
        limits.setdefault(threshold.metric, []).append((value, label))
    return limits
