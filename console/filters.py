"""What the console's lists filter on alike: a time range, relative (the last hour, six hours,
day or week, by the database's clock) or absolute (From / To with the browser's date and time
picker), and a tool by any part of its name. Each list's form adds its own fields; every field
is a query parameter, so a filtered list is a URL that can be shared."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.db.models import Q
from django.http import QueryDict
from django.utils.translation import gettext_lazy as _

from ledger.clock import db_now

DATETIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"]
#: Relative time ranges: the last hour, six hours, day or week, by the database's clock.
RANGES = {
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(days=1),
    "7d": timedelta(days=7),
}


def local_datetime(label: Any) -> forms.DateTimeField:
    """A date-time filter with the browser's date and time picker."""
    return forms.DateTimeField(
        label=label,
        required=False,
        input_formats=DATETIME_FORMATS,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )


#: The relative ranges as the filters offer them.
RANGE_LABELS = [
    ("1h", _("last hour")),
    ("6h", _("last 6 hours")),
    ("24h", _("last 24 hours")),
    ("7d", _("last 7 days")),
]


class WindowForm(forms.Form):
    """A dashboard's window: one of ``RANGES``, the last 24 hours unless another is chosen.
    Charts of 5-minute buckets are drawn hourly over 7 days (168 points, not 2,016)."""

    DEFAULT = "24h"
    HOURLY = frozenset({"7d"})

    range = forms.ChoiceField(label=_("Time"), required=False, choices=RANGE_LABELS)

    @property
    def chosen(self) -> str:
        """The chosen range, or the default where none (or one not offered) is chosen."""
        return (self.cleaned_data.get("range") if self.is_valid() else "") or self.DEFAULT

    @property
    def label(self) -> str:
        return str(dict(RANGE_LABELS)[self.chosen])

    @property
    def hourly(self) -> bool:
        return self.chosen in self.HOURLY

    def span(self) -> tuple[datetime, datetime]:
        """The window's start and end, by the database's clock."""
        end = db_now()
        return end - RANGES[self.chosen], end


class TimeRangeForm(forms.Form):
    """A list's time window: ``range`` (relative) or ``since`` / ``until`` (absolute), not
    both. Once valid, ``cleaned_data["since"]`` holds the start of a relative range too."""

    range = forms.ChoiceField(
        label=_("Time"),
        required=False,
        choices=[("", _("any time")), *RANGE_LABELS],
    )
    since = local_datetime(_("From"))
    until = local_datetime(_("To"))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("range") and (data.get("since") or data.get("until")):
            raise forms.ValidationError(_("Choose a relative time or From / To, not both."))
        if data.get("range"):
            data["since"] = db_now() - RANGES[data["range"]]
        return data

    def in_range(self, field: str) -> Q:
        """The rows whose ``field`` (a time) lies in the chosen window (all without one)."""
        data = self.cleaned_data
        window = Q()
        if data.get("since"):
            window &= Q(**{f"{field}__gte": data["since"]})
        if data.get("until"):
            window &= Q(**{f"{field}__lt": data["until"]})
        return window

    def query_without_cursor(self, *cursors: str) -> str:
        """The filters as a query string without the page cursor (``before`` unless named) or
        the export format: for the pager's links and the CSV link."""
        assert isinstance(self.data, QueryDict)
        params = self.data.copy()
        for name in (*(cursors or ("before",)), "format"):
            params.pop(name, None)
        return str(params.urlencode())


def tool_matches(text: str, path: str = "tool__name") -> Q:
    """The rows whose tool (at ``path``) has ``text`` anywhere in its name: ``create`` finds
    ``create_order``. Every list's tool filter matches this way."""
    return Q(**{f"{path}__contains": text}) if text else Q()
