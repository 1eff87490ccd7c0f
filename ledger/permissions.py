"""Who may do what in a tenant: the console's roles and the API's scopes, in one table.

A person acts in a tenant through their membership there (``ledger.models.Membership``): its
role decides which console pages they may use and which API scopes their tokens carry, so a
role changed or a membership ended takes effect on their next request, in the console and on
the API alike. A service account (a runtime, not a person) has no role: each of its tokens
names its scopes, and none of them may ever decide an approval.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import models


class Role(models.TextChoices):
    OPERATOR = "operator"
    APPROVER = "approver"
    MANAGER = "manager"
    ADMIN = "admin"


def allows(roles: set[Role], allowed: tuple[Role, ...]) -> bool:
    """Whether a user holding ``roles`` may use a view open to ``allowed`` (none: any member)."""
    return not allowed or Role.ADMIN in roles or bool(roles & set(allowed))


class Scope(models.TextChoices):
    """What an API operation needs of the token that calls it."""

    #: Record calls and their outcomes, replay them, read calls and records.
    CALLS = "calls", "record, start, complete and replay calls"
    #: Start, read and finish runs.
    RUNS = "runs", "start, read and finish runs"
    #: Register tools (their key fields and compensations), import MCP tools, classify.
    TOOLS = "tools", "register and import tools"
    #: Read the version combinations.
    COMBINATIONS = "combinations", "read version combinations"
    #: Change combinations (activate, canary, shadow, halt, resume, retire, roll back), their
    #: thresholds and rollouts; read their metrics and rollout plans.
    LIFECYCLE = "lifecycle", "change version combinations, thresholds and rollouts"
    #: Set the policies that ask a human before an action first runs.
    POLICIES = "policies", "set approval policies"
    #: Read what waits for an approver.
    APPROVALS_READ = "approvals:read", "read approvals"
    #: Approve or reject: a person's only, never a service account's.
    APPROVALS_DECIDE = "approvals:decide", "decide approvals"
    #: Ask for the compensation of an action or a run, and read it.
    COMPENSATIONS = "compensations", "request compensations"


#: What any member may do through the API, whatever their role: run agents.
_MEMBER = frozenset({Scope.CALLS, Scope.RUNS, Scope.TOOLS, Scope.COMBINATIONS})

#: A role's scopes: what its console pages let it do, as API operations.
ROLE_SCOPES: dict[Role | None, frozenset[Scope]] = {
    None: _MEMBER,
    Role.OPERATOR: _MEMBER | {Scope.APPROVALS_READ, Scope.COMPENSATIONS},
    Role.APPROVER: _MEMBER | {Scope.APPROVALS_READ, Scope.APPROVALS_DECIDE, Scope.COMPENSATIONS},
    Role.MANAGER: _MEMBER | {Scope.LIFECYCLE, Scope.POLICIES, Scope.APPROVALS_READ},
    Role.ADMIN: frozenset(Scope),
}

#: The scopes a service account's token may be given: every one but deciding approvals.
SERVICE_ACCOUNT_SCOPES = frozenset(Scope) - {Scope.APPROVALS_DECIDE}
#: A new token's scopes when none are named: a service account's runs agents; a person's
#: follows their role.
RUNTIME_SCOPES = _MEMBER
PERSON_TOKEN_SCOPES = frozenset(Scope)


def role_scopes(roles: Iterable[Role]) -> frozenset[Scope]:
    """The scopes a member with ``roles`` (none: a member without a role) holds."""
    held = set(ROLE_SCOPES[None])
    for role in roles:
        held |= ROLE_SCOPES[role]
    return frozenset(held)


def token_scopes_problem(scopes: Iterable[str], *, service_account: bool) -> str | None:
    """Why a token may not be given ``scopes``, or None."""
    names = list(scopes)
    unknown = sorted(set(names) - set(Scope.values))
    if unknown:
        return f"unknown scope {unknown[0]!r} (known: {', '.join(Scope.values)})"
    if service_account and Scope.APPROVALS_DECIDE in names:
        return "a service account's token can never decide approvals: a person must"
    return None
