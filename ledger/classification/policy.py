"""The last two layers of a tool's classification: org policy rules and human overrides.

Both are deliberate decisions by people of the tenant, so unlike an MCP server's claims they may
make a tool less conservative as well as more. Overrides are audited by the service that
records them; here they are only applied.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

from django.utils.translation import gettext_noop

from ledger.classification import (
    OVERRIDE_RULE,
    POLICY_RULE_PREFIX,
    UNDECLARED,
    Classification,
    most_conservative,
)
from ledger.classification.arguments import DecidingArgument
from ledger.classification.catalogue import SHELL_TOOLS, catalogue_tool
from ledger.classification.mcp import classify_mcp_tool, per_call_fallback
from ledger.domain import POLICY_FOR, Idempotency, PerCall, ServerTrust
from ledger.stored_text import StoredText


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """An org rule: tools whose name matches ``pattern`` (shell-style glob) get this class."""

    pattern: str
    idempotency: Idempotency
    destructive: bool
    reason: str
    rule_id: str

    def matches(self, tool_name: str) -> bool:
        return fnmatch.fnmatchcase(tool_name, self.pattern)


@dataclass(frozen=True, slots=True)
class Override:
    """A human decision on one tool, with the reason that was given for it."""

    idempotency: Idempotency
    destructive: bool
    reason: str
    actor: str


_ORG_POLICY = StoredText(gettext_noop("Org policy '%(pattern)s': %(reason)s"))
_OVERRIDDEN = StoredText(gettext_noop("Overridden by %(actor)s: %(reason)s"))
_DECLARED = StoredText(gettext_noop("Declared %(idempotency)s at registration."))
_DECLARED_LOOSER = StoredText(
    gettext_noop(
        "Declared %(idempotency)s at registration, but a declaration may only make a tool "
        "stricter than the ledger reads it: %(reason)s A manager's override can loosen it."
    ),
    texts=("reason",),
)
_SHELL_FALLBACK = StoredText(
    gettext_noop("A shell tool is classified per call from its command; this is the fallback.")
)


def apply_policy(
    base: Classification, tool_name: str, rules: Iterable[PolicyRule]
) -> Classification:
    """The first matching rule (in the order given) replaces the computed classification."""
    for rule in rules:
        if rule.matches(tool_name):
            return Classification(
                rule.idempotency,
                POLICY_FOR[rule.idempotency],
                rule.destructive or base.destructive,
                _ORG_POLICY(pattern=rule.pattern, reason=rule.reason),
                f"{POLICY_RULE_PREFIX}{rule.rule_id}",
            )
    return base


def apply_override(base: Classification, override: Override | None) -> Classification:
    if override is None:
        return base
    return Classification(
        override.idempotency,
        POLICY_FOR[override.idempotency],
        override.destructive,
        _OVERRIDDEN(actor=override.actor, reason=override.reason),
        OVERRIDE_RULE,
    )


def declared_classification(
    tool_name: str, declared: Idempotency | None, description: str = ""
) -> Classification:
    """A tool registered by the tenant's own runtime, with its declared idempotency if any.

    The ledger classifies; a declaration is a hint that may only make a tool stricter than the
    ledger reads it: the catalogue for a catalogue tool (``send_email`` declared idempotent
    stays non-idempotent), else its name and description as an untrusted MCP tool's are read
    (``place_order_v2`` declared idempotent stays non-idempotent: its name says it creates a
    side effect). Only a manager's override, audited, loosens it.
    """
    known = catalogue_tool(tool_name)
    if declared is None:
        return known.classification if known is not None else UNDECLARED
    result = Classification.of(
        declared, reason=_DECLARED(idempotency=declared.value), rule="declared"
    )
    if known is not None:
        return most_conservative(known.classification, result)
    if declared is Idempotency.NON_IDEMPOTENT:
        return result
    read = classify_mcp_tool(
        {"name": tool_name, "description": description, "inputSchema": {"type": "object"}},
        trust=ServerTrust.UNTRUSTED,
    )
    if read.idempotency.rank <= declared.rank:
        return most_conservative(result, read)
    return Classification(
        read.idempotency,
        read.replay_policy,
        read.destructive,
        _DECLARED_LOOSER(idempotency=declared.value, reason=read.reason),
        "declared.stricter",
    )


def shell_tool_classification() -> Classification:
    return Classification.of(
        Idempotency.NON_IDEMPOTENT,
        reason=_SHELL_FALLBACK(),
        rule="shell.per_call",
    )


def base_classification(
    *,
    tool_name: str,
    declared: Idempotency | None,
    mcp_descriptor: dict[str, object] | None,
    trust: ServerTrust | None,
    namespace: str = "",
    implementation: str = "",
    code_argument: DecidingArgument | None = None,
    description: str = "",
) -> Classification:
    """The computed classification of a registry tool, before policy and overrides;
    ``code_argument`` is a registered hint that an argument carries code; ``description``
    the runtime's, read with the name where a declaration would loosen the tool."""
    if tool_name in SHELL_TOOLS:
        return shell_tool_classification()
    if mcp_descriptor is not None:
        return classify_mcp_tool(
            mcp_descriptor,
            trust=trust or ServerTrust.UNTRUSTED,
            namespace=namespace,
            implementation=implementation,
        )
    declared_class = declared_classification(tool_name, declared, description)
    if code_argument is not None and code_argument.kind is not PerCall.FILE_WRITE:
        return per_call_fallback(code_argument, declared_class)
    return declared_class


def effective_classification(
    base: Classification,
    *,
    tool_name: str,
    rules: Iterable[PolicyRule] = (),
    override: Override | None = None,
) -> Classification:
    """Policy rules, then the human override, on top of the computed classification."""
    return apply_override(apply_policy(base, tool_name, rules), override)
