"""The built-in catalogue: the seeds' tools with their classification and key scope."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext_noop

from ledger.classification import Classification
from ledger.domain import Idempotency, KeyScope
from ledger.stored_text import StoredText

SHELL_TOOLS = frozenset({"run_command", "shell", "bash", "exec_command", "run_shell"})
"""Tools whose classification depends on the command in their input (see ``commands``)."""


@dataclass(frozen=True, slots=True)
class CatalogueTool:
    name: str
    classification: Classification
    key_scope: KeyScope
    description: str


def _tool(
    name: str,
    idempotency: Idempotency,
    reason: StoredText,
    *,
    description: str,
    destructive: bool = False,
    key_scope: KeyScope = KeyScope.RUN,
) -> CatalogueTool:
    classification = Classification.of(
        idempotency, reason=reason(), rule=f"catalogue.{name}", destructive=destructive
    )
    return CatalogueTool(name, classification, key_scope, description)


_READ = StoredText(gettext_noop("Reads state without changing it; repeating it changes nothing."))
_WRITE = StoredText(
    gettext_noop(
        "Overwrites state; safe to replay only after its condition (base hash) is checked."
    )
)
_EFFECT = StoredText(gettext_noop("Creates an external side effect; a repeat would duplicate it."))

CATALOGUE: dict[str, CatalogueTool] = {
    tool.name: tool
    for tool in [
        _tool("read_file", Idempotency.IDEMPOTENT, _READ, description="Read a file."),
        _tool("list_files", Idempotency.IDEMPOTENT, _READ, description="List a directory."),
        _tool("search_code", Idempotency.IDEMPOTENT, _READ, description="Search source code."),
        _tool("get_order_status", Idempotency.IDEMPOTENT, _READ, description="Look up an order."),
        _tool(
            "pure_compute",
            Idempotency.IDEMPOTENT,
            StoredText(gettext_noop("A pure computation with no side effects.")),
            description="Compute a value from its input.",
        ),
        _tool("write_file", Idempotency.CONDITIONAL, _WRITE, description="Write a file."),
        _tool(
            "apply_patch",
            Idempotency.CONDITIONAL,
            StoredText(
                gettext_noop(
                    "Replay only if the patch is not applied yet (checked by file hashes)."
                )
            ),
            description="Apply a patch to files.",
        ),
        _tool(
            "update_config", Idempotency.CONDITIONAL, _WRITE, description="Update a config file."
        ),
        _tool(
            "send_email",
            Idempotency.NON_IDEMPOTENT,
            _EFFECT,
            description="Send an email.",
            key_scope=KeyScope.BUSINESS,
        ),
        _tool(
            "create_order",
            Idempotency.NON_IDEMPOTENT,
            _EFFECT,
            description="Create an order.",
            key_scope=KeyScope.BUSINESS,
        ),
        _tool(
            "charge_customer",
            Idempotency.NON_IDEMPOTENT,
            StoredText(gettext_noop("Moves money; a repeat charges the customer twice.")),
            description="Charge a customer's card.",
            key_scope=KeyScope.BUSINESS,
        ),
        _tool(
            "create_issue",
            Idempotency.NON_IDEMPOTENT,
            _EFFECT,
            description="Open an issue in the tracker.",
            key_scope=KeyScope.BUSINESS,
        ),
        _tool(
            "merge_pull_request",
            Idempotency.NON_IDEMPOTENT,
            StoredText(gettext_noop("Merges code; cannot be undone by replaying.")),
            description="Merge a pull request.",
            key_scope=KeyScope.BUSINESS,
        ),
        _tool(
            "run_migration",
            Idempotency.NON_IDEMPOTENT,
            StoredText(gettext_noop("Changes a database schema; destructive and not repeatable.")),
            description="Run a database migration.",
            destructive=True,
        ),
    ]
}


def catalogue_tool(name: str) -> CatalogueTool | None:
    """The built-in entry for ``name``, if any."""
    return CATALOGUE.get(name)
