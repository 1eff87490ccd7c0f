"""Re-classification of MCP tools entering the registry.

The tool's *name* gives the baseline, write verbs checked before read verbs (``get_and_delete``
is a delete). What the server says about the tool (its description and its ``ToolAnnotations``)
is a claim: from an **untrusted** server it may only make the result more conservative; from a
**trusted** server the annotations are believed, except that they cannot clear a name that says
the tool destroys something. Per the MCP spec, ``destructiveHint`` and ``openWorldHint`` default
to true and ``readOnlyHint`` and ``idempotentHint`` to false.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ledger.classification import UNDECLARED, Classification, most_conservative
from ledger.domain import Idempotency, ServerTrust

DESTRUCTIVE_VERBS = frozenset(
    [
        "delete",
        "remove",
        "drop",
        "destroy",
        "purge",
        "truncate",
        "wipe",
        "erase",
        "kill",
        "terminate",
        "revoke",
        "uninstall",
        "unpublish",
        "rm",
        "del",
        "reset",
        "clear",
        "clean",
        "prune",
        "unlink",
        "rmdir",
        "shred",
        "evict",
    ]
)
EFFECT_VERBS = frozenset(
    [
        "create",
        "send",
        "charge",
        "pay",
        "transfer",
        "refund",
        "publish",
        "merge",
        "post",
        "commit",
        "push",
        "deploy",
        "execute",
        "exec",
        "run",
        "invoke",
        "trigger",
        "add",
        "append",
        "insert",
        "submit",
        "book",
        "order",
        "buy",
        "purchase",
        "invite",
        "notify",
        "email",
        "message",
        "reply",
        "comment",
        "forward",
        "fork",
        "star",
        "follow",
        "schedule",
        "start",
        "stop",
        "restart",
        "launch",
        "spawn",
        "provision",
        "allocate",
        "mint",
        "sign",
        "approve",
        "reject",
        "assign",
        "close",
        "reopen",
        "cancel",
        "archive",
        "move",
        "rename",
        "upload",
        "import",
        "sync",
        "install",
        "clone",
        "checkout",
        "rebase",
        "cherry",
        "publish",
        "release",
        "migrate",
        "enqueue",
        "dispatch",
        "subscribe",
        "unsubscribe",
        "register",
        "login",
        "logout",
        "grant",
        "transfer",
        "withdraw",
        "deposit",
    ]
)
OVERWRITE_VERBS = frozenset(
    [
        "write",
        "update",
        "set",
        "put",
        "replace",
        "edit",
        "patch",
        "apply",
        "save",
        "modify",
        "upsert",
        "configure",
        "enable",
        "disable",
        "mark",
        "label",
        "toggle",
        "overwrite",
        "store",
        "change",
        "rewrite",
        "format",
    ]
)
READ_VERBS = frozenset(
    [
        "read",
        "get",
        "list",
        "search",
        "find",
        "fetch",
        "query",
        "show",
        "describe",
        "view",
        "lookup",
        "status",
        "diff",
        "log",
        "count",
        "inspect",
        "browse",
        "stat",
        "info",
        "explain",
        "preview",
        "download",
        "check",
        "validate",
        "resolve",
        "ping",
        "head",
        "lint",
        "summarize",
        "analyze",
        "compare",
        "render",
        "parse",
        "poll",
        "ls",
        "cat",
        "grep",
        "retrieve",
        "load",
        "lookup",
        "print",
    ]
)
_DESTRUCTIVE_PHRASES = re.compile(
    r"\b(irreversibl[ey]|cannot be undone|permanently|destructive)\b", re.IGNORECASE
)
_TOKEN_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


def _tokens(name: str) -> list[str]:
    return [t.lower() for t in _TOKEN_SPLIT.split(name) if t]


def _stems(word: str) -> set[str]:
    """The word and its plausible base forms (creates, created, creating -> create)."""
    forms = {word}
    for suffix, replacement in (
        ("ies", "y"),
        ("es", ""),
        ("s", ""),
        ("ed", ""),
        ("ed", "e"),
        ("d", ""),
        ("ing", ""),
        ("ing", "e"),
    ):
        if word.endswith(suffix) and len(word) - len(suffix) >= 2:
            forms.add(word[: -len(suffix)] + replacement)
    return forms


def _verb_class(words: list[str], origin: str) -> Classification | None:
    """Classify by the first matching verb class, write classes before read."""
    for verbs, idempotency, destructive, what in (
        (DESTRUCTIVE_VERBS, Idempotency.NON_IDEMPOTENT, True, "destroys something"),
        (EFFECT_VERBS, Idempotency.NON_IDEMPOTENT, False, "creates a side effect"),
        (OVERWRITE_VERBS, Idempotency.CONDITIONAL, False, "overwrites state"),
        (READ_VERBS, Idempotency.IDEMPOTENT, False, "only reads"),
    ):
        for word in words:
            if _stems(word) & verbs:
                return Classification.of(
                    idempotency,
                    reason=f"The {origin} says it {what} ('{word}').",
                    rule=f"mcp.{origin}.{'destructive' if destructive else idempotency.value}",
                    destructive=destructive,
                )
    return None


def _leading_verbs(description: str) -> list[str]:
    """The first word of each sentence: tool descriptions lead with their verb."""
    verbs = []
    for sentence in re.split(r"[.!?\n;]+", description):
        words = _tokens(sentence)
        if words:
            verbs.append(words[0])
    return verbs


def _hint(annotations: Mapping[str, Any], name: str) -> bool | None:
    value = annotations.get(name)
    return value if isinstance(value, bool) else None


def validate_descriptor(descriptor: Any) -> tuple[str, str, Mapping[str, Any]]:
    """Check the parts of an MCP tool descriptor the classifier reads; raise ValueError if off."""
    if not isinstance(descriptor, Mapping):
        raise ValueError("each tool must be a JSON object")
    name = descriptor.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("a tool needs a non-empty string 'name'")
    description = descriptor.get("description")
    description = "" if description is None else description
    if not isinstance(description, str):
        raise ValueError(f"tool {name!r}: 'description' must be a string")
    annotations = descriptor.get("annotations")
    annotations = {} if annotations is None else annotations
    if not isinstance(annotations, Mapping):
        raise ValueError(f"tool {name!r}: 'annotations' must be an object")
    return name, description, annotations


def classify_mcp_tool(descriptor: Mapping[str, Any], *, trust: ServerTrust) -> Classification:
    """Classify one tool of an MCP ``tools/list`` result from a server of the given trust."""
    name, description, annotations = validate_descriptor(descriptor)
    from_name = _verb_class(_tokens(name), "name")
    result = from_name or UNDECLARED
    if trust is ServerTrust.TRUSTED:
        result = _believe_annotations(result, from_name, annotations)
    else:
        result = _raise_only(result, description, annotations)
    return result


def _raise_only(
    result: Classification, description: str, annotations: Mapping[str, Any]
) -> Classification:
    """Untrusted claims: each can only make ``result`` more conservative."""
    from_description = _verb_class(_leading_verbs(description), "description")
    if from_description is not None:
        result = most_conservative(result, from_description)
    if _DESTRUCTIVE_PHRASES.search(description):
        result = most_conservative(
            result,
            Classification.of(
                Idempotency.NON_IDEMPOTENT,
                reason="The description says the effect is permanent.",
                rule="mcp.description.destructive",
                destructive=True,
            ),
        )
    read_only = _hint(annotations, "readOnlyHint")
    destructive = _hint(annotations, "destructiveHint")
    idempotent = _hint(annotations, "idempotentHint")
    if read_only is False or destructive is True:
        says_destructive = destructive is not False  # spec default: true
        idempotency = (
            Idempotency.CONDITIONAL
            if idempotent is True and not says_destructive
            else Idempotency.NON_IDEMPOTENT
        )
        result = most_conservative(
            result,
            Classification.of(
                idempotency,
                reason="The server's annotations say the tool writes"
                + (" destructively." if says_destructive else "."),
                rule="mcp.annotations.untrusted",
                destructive=says_destructive,
            ),
        )
    if read_only is True and result.idempotency is not Idempotency.IDEMPOTENT:
        result = Classification(
            result.idempotency,
            result.replay_policy,
            result.destructive,
            result.reason + " (readOnlyHint is not believed from an untrusted server.)",
            result.rule,
        )
    return result


def _believe_annotations(
    result: Classification, from_name: Classification | None, annotations: Mapping[str, Any]
) -> Classification:
    """Trusted claims: the annotations decide, unless the name says the tool destroys."""
    read_only = _hint(annotations, "readOnlyHint")
    destructive = _hint(annotations, "destructiveHint")
    idempotent = _hint(annotations, "idempotentHint")
    if read_only is None and destructive is None and idempotent is None:
        return result
    if from_name is not None and from_name.destructive:
        return Classification(
            result.idempotency,
            result.replay_policy,
            True,
            result.reason + " Annotations cannot clear a destructive name.",
            result.rule,
        )
    if read_only is True:
        if from_name is not None and from_name.idempotency is not Idempotency.IDEMPOTENT:
            return Classification(
                result.idempotency,
                result.replay_policy,
                result.destructive,
                result.reason + " A readOnlyHint that contradicts the name is not believed.",
                result.rule,
            )
        return Classification.of(
            Idempotency.IDEMPOTENT,
            reason="The trusted server declares the tool read-only (readOnlyHint).",
            rule="mcp.annotations.trusted.read_only",
        )
    says_destructive = destructive is not False
    if idempotent is True and not says_destructive:
        return Classification.of(
            Idempotency.CONDITIONAL,
            reason="The trusted server declares an idempotent, non-destructive write.",
            rule="mcp.annotations.trusted.idempotent_write",
        )
    return Classification.of(
        Idempotency.NON_IDEMPOTENT,
        reason="The trusted server declares a write that is not idempotent"
        + (" and may be destructive." if says_destructive else "."),
        rule="mcp.annotations.trusted.write",
        destructive=says_destructive,
    )
