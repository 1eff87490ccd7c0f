"""The Tools page's compensation set-up (docs/compensation.md): a manager names the tool's
compensating tool, where each of its arguments comes from, and how a worker runs it (the
compensating tool's adapters), in one form. The form only parses what was typed;
``reconcile.compensations.set_up_compensation`` holds the rules and writes."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from ledger.models import DeclaredCompensation, Tenant, Tool
from ledger.redaction import redact_text
from reconcile.models import CompensationAdapter, DownstreamAdapter

#: One argument a line (or between commas): ``order_id = result.id`` or ``order_id <- result.id``.
_ARGUMENT = re.compile(r"^\s*([^=<\s]+)\s*(?:=|<-)\s*(\S+)\s*$")
_SEPARATORS = re.compile(r"[\n,;]")
DEFAULT_STATUSES = "200, 201"


def _tool_choices(tools: list[str]) -> list[tuple[str, str]]:
    return [("", "—"), *((name, name) for name in tools)]


class CompensationSetupForm(forms.Form):
    """What a manager types; the service checks it (``set_up_compensation``)."""

    tool = forms.ChoiceField(label=_("Tool whose action is undone"))
    compensating_tool = forms.ChoiceField(label=_("Compensating tool"))
    arguments = forms.CharField(
        label=_("Arguments"),
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "class": "mono"}),
        help_text=_(
            "One a line: name = input.<path> or result.<path>, such as order_id = result.id."
        ),
    )
    url_template = forms.CharField(
        label=_("POST URL"),
        max_length=1000,
        widget=forms.TextInput(attrs={"class": "mono"}),
        help_text=_(
            "A worker POSTs the arguments as JSON here, with the compensation's key as "
            "Idempotency-Key; {name} is that argument, URL-quoted."
        ),
    )
    success_statuses = forms.CharField(
        label=_("Statuses that mean done"), max_length=100, initial=DEFAULT_STATUSES
    )
    lookup_url_template = forms.CharField(
        label=_("Look-up URL (optional)"),
        max_length=1000,
        required=False,
        widget=forms.TextInput(attrs={"class": "mono"}),
        help_text=_(
            "GET with {key}: finds a compensation whose answer was lost, so it is never sent "
            "twice. 200 is found, 404 not found."
        ),
    )

    def __init__(self, *args: Any, tools: list[str], **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "comp-%s")
        super().__init__(*args, **kwargs)
        tool_field = self.fields["tool"]
        by_field = self.fields["compensating_tool"]
        assert isinstance(tool_field, forms.ChoiceField)
        assert isinstance(by_field, forms.ChoiceField)
        tool_field.choices = by_field.choices = _tool_choices(tools)

    def clean_arguments(self) -> Any:
        """A JSON object as the API takes it, or ``name = path`` pairs."""
        text = self.cleaned_data["arguments"].strip()
        if text.startswith(("{", "[")):
            try:
                return json.loads(text)
            except ValueError:
                raise forms.ValidationError(_("That is not valid JSON.")) from None
        mapping: dict[str, str] = {}
        for part in filter(str.strip, _SEPARATORS.split(text)):
            found = _ARGUMENT.match(part)
            if found is None:
                raise forms.ValidationError(
                    _("Write each argument as name = path, such as order_id = result.id.")
                )
            mapping[found.group(1)] = found.group(2)
        return mapping

    def clean_success_statuses(self) -> list[int]:
        words = self.cleaned_data["success_statuses"].replace(",", " ").split()
        if not all(word.isdigit() for word in words):
            raise forms.ValidationError(_("Give the statuses as numbers, such as 200, 201."))
        return [int(word) for word in words]


@dataclass(frozen=True, slots=True)
class SetUp:
    """One tool's compensation as the Tools page lists it."""

    declaration: DeclaredCompensation
    adapter: CompensationAdapter | None
    lookup: DownstreamAdapter | None

    @property
    def tool_name(self) -> str:
        tool = self.declaration.tool
        return tool.name if tool is not None else ""

    @property
    def arguments(self) -> str:
        return "\n".join(f"{name} = {path}" for name, path in self.declaration.arguments.items())

    @property
    def shown_url(self) -> str:
        """The URL as every member reads it: a secret in it (a token in the query) redacted."""
        return redact_text(self.adapter.url_template) if self.adapter else ""

    @property
    def shown_lookup(self) -> str:
        return redact_text(self.lookup.url_template) if self.lookup else ""


def set_ups(tenant: Tenant, limit: int = 500) -> list[SetUp]:
    """The tenant's tool compensations, by tool name, each with its compensating tool's
    adapters (three statements, however many)."""
    declarations = list(
        DeclaredCompensation.objects.filter(tenant=tenant, tool__isnull=False)
        .select_related("tool", "compensating_tool")
        .order_by("tool__name")[:limit]
    )
    targets = {d.compensating_tool_id for d in declarations}
    adapters = {a.tool_id: a for a in CompensationAdapter.objects.filter(tool_id__in=targets)}
    lookups = {a.tool_id: a for a in DownstreamAdapter.objects.filter(tool_id__in=targets)}
    return [
        SetUp(d, adapters.get(d.compensating_tool_id), lookups.get(d.compensating_tool_id))
        for d in declarations
    ]


def initial_for(set_up: SetUp | None) -> dict[str, Any]:
    """The form filled in with ``set_up`` (the one a manager changes), else empty."""
    if set_up is None:
        return {"success_statuses": DEFAULT_STATUSES}
    adapter, lookup = set_up.adapter, set_up.lookup
    return {
        "tool": set_up.tool_name,
        "compensating_tool": set_up.declaration.compensating_tool.name,
        "arguments": set_up.arguments,
        "url_template": adapter.url_template if adapter else "",
        "success_statuses": ", ".join(map(str, adapter.success_statuses))
        if adapter and adapter.success_statuses
        else DEFAULT_STATUSES,
        "lookup_url_template": lookup.url_template if lookup and lookup.url_template else "",
    }


def tool_names(tenant: Tenant) -> list[str]:
    return list(Tool.objects.filter(tenant=tenant).order_by("name").values_list("name", flat=True))
