"""The API's role-by-operation matrix, generated from the routes: every operation names the scope
it needs, and every kind of token is refused (403) exactly where it lacks that scope. A new
operation is covered by default, and one that names no scope fails here.

``WHO_MAY`` says independently of the scopes which roles may use each operation, as the console
allows the same action: a route given a wider scope than its action allows fails here too, and
a new route fails until it is written there."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import get_resolver

from console.api import api
from ledger.api.auth import TokenAuth
from ledger.models import ApiToken, Membership, Tenant
from ledger.permissions import (
    ROLE_SCOPES,
    RUNTIME_SCOPES,
    SERVICE_ACCOUNT_SCOPES,
    Role,
    Scope,
)

pytestmark = pytest.mark.django_db

#: A value for each kind of path parameter: none names an existing object, so an allowed request
#: is answered 404 (or 400/422 for its empty body) after its scope was checked.
_PARAMETERS = {
    "int": "999999",
    "uuid": str(uuid.uuid4()),
    "call_id": str(uuid.uuid4()),
    "action": "pause",
}
_PARAMETER = re.compile(r"\{(?:(?P<kind>[a-z]+):)?(?P<name>[a-z_]+)\}")


def _filled(path: str) -> str:
    """``path`` with a value for each parameter, by its converter or its name."""
    return _PARAMETER.sub(
        lambda m: _PARAMETERS.get(m["kind"] or "", _PARAMETERS.get(m["name"], "none")), path
    )


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    scope: Scope | None
    route: str

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def _operations() -> Iterator[Operation]:
    """Every operation as served: the routers as the API bound them, each operation with the
    auth it inherited."""
    get_resolver().url_patterns  # noqa: B018 - the URLconf binds the routers
    for router in api._get_bound_routers():
        for path, view in router.path_operations.items():
            route = f"{router.prefix}{_PARAMETER.sub(lambda m: '{' + m['name'] + '}', path)}"
            url = _filled(f"/api/v1{router.prefix}{path}")
            for operation in view.operations:
                scopes = [
                    callback.scope
                    for callback in operation.auth_callbacks
                    if isinstance(callback, TokenAuth)
                ]
                for method in operation.methods:
                    scope = scopes[0] if len(scopes) == 1 else None
                    yield Operation(method, url, scope, f"{method} {route}")


OPERATIONS = sorted(_operations(), key=str)


def _request(token: str, operation: Operation) -> tuple[int, str]:
    response = Client().generic(
        operation.method,
        operation.path,
        data="{}" if operation.method == "POST" else "",
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
        secure=True,
    )
    body = response.json() if response.content else None
    code = body.get("code", "") if isinstance(body, dict) else ""
    return response.status_code, code


def _person(tenant: Tenant, role: Role | None) -> str:
    user = get_user_model().objects.create_user(f"person-{role or 'member'}", password=None)
    Membership.objects.create(user=user, tenant=tenant, role=role or "")
    return ApiToken.issue(tenant=tenant, name=f"{role}-laptop", user=user)[1]


def _service(tenant: Tenant, name: str, scopes: frozenset[Scope]) -> str:
    return ApiToken.issue(tenant=tenant, name=name, scopes=sorted(scopes))[1]


def test_every_operation_names_one_scope() -> None:
    unscoped = [str(operation) for operation in OPERATIONS if operation.scope is None]
    assert OPERATIONS and not unscoped


def _assert_matrix(token: str, holds: frozenset[Scope], who: str) -> None:
    wrong = []
    for operation in OPERATIONS:
        status, code = _request(token, operation)
        refused = (status, code) == (403, "FORBIDDEN")
        if refused == (operation.scope in holds) or status == 401:
            wrong.append(f"{operation} -> {status} {code}")
    assert not wrong, f"{who}: {wrong}"


@pytest.mark.parametrize("role", [None, *Role], ids=lambda role: str(role or "no-role"))
def test_a_persons_token_does_what_their_role_allows(tenant: Tenant, role: Role | None) -> None:
    token = _person(tenant, role)
    _assert_matrix(token, ROLE_SCOPES[role], f"a {role or 'member without a role'}")


def test_a_runtimes_token_runs_agents_and_nothing_else(tenant: Tenant) -> None:
    token = _service(tenant, "runtime", RUNTIME_SCOPES)
    _assert_matrix(token, RUNTIME_SCOPES, "a runtime")


@pytest.mark.parametrize("missing", sorted(SERVICE_ACCOUNT_SCOPES))
def test_a_service_token_is_refused_what_its_scopes_leave_out(
    tenant: Tenant, missing: Scope
) -> None:
    held = SERVICE_ACCOUNT_SCOPES - {missing}
    token = _service(tenant, "ci", held)
    refused = [
        str(operation)
        for operation in OPERATIONS
        if operation.scope == missing and _request(token, operation) != (403, "FORBIDDEN")
    ]
    assert not refused, refused


ANY_MEMBER = frozenset({None, *Role})
MANAGERS = frozenset({Role.MANAGER, Role.ADMIN})
STAFF = frozenset({Role.OPERATOR, Role.APPROVER, Role.MANAGER, Role.ADMIN})
ON_CALL = frozenset({Role.OPERATOR, Role.APPROVER, Role.ADMIN})
APPROVERS = frozenset({Role.APPROVER, Role.ADMIN})

#: Who may use each operation (None: a member without a role), as the console allows the same
#: action: running agents is any member's; approving an approver's; asking for and reading
#: compensations the on-call roles'; changing combinations, their thresholds, rollouts and
#: metrics, and approval policies, a manager's.
WHO_MAY: dict[str, frozenset[Role | None]] = {
    "GET /approval-policies": MANAGERS,
    "POST /approval-policies": MANAGERS,
    "DELETE /approval-policies/{policy_id}": MANAGERS,
    "GET /approvals": STAFF,
    "GET /approvals/{approval_id}": STAFF,
    "POST /approvals/{approval_id}/decide": APPROVERS,
    "POST /calls": ANY_MEMBER,
    "POST /calls/batch": ANY_MEMBER,
    "GET /calls/{call_id}": ANY_MEMBER,
    "POST /calls/{call_id}/complete": ANY_MEMBER,
    "POST /calls/{call_id}/heartbeat": ANY_MEMBER,
    "POST /calls/{call_id}/replay": ANY_MEMBER,
    "POST /calls/{call_id}/start": ANY_MEMBER,
    "GET /combinations": ANY_MEMBER,
    "POST /combinations": MANAGERS,
    "GET /combinations/{combination_id}": ANY_MEMBER,
    "POST /combinations/{combination_id}/activate": MANAGERS,
    "POST /combinations/{combination_id}/canary": MANAGERS,
    "POST /combinations/{combination_id}/halt": MANAGERS,
    "POST /combinations/{combination_id}/resume": MANAGERS,
    "POST /combinations/{combination_id}/retire": MANAGERS,
    "POST /combinations/{combination_id}/rollback": MANAGERS,
    "POST /combinations/{combination_id}/shadow": MANAGERS,
    "POST /combinations/{combination_id}/unshadow": MANAGERS,
    "GET /compensations": ON_CALL,
    "POST /compensations": ON_CALL,
    "POST /compensations/declarations": ANY_MEMBER,
    "GET /compensations/preview": ON_CALL,
    "GET /compensations/runs/{run_id}": ON_CALL,
    "POST /compensations/runs/{run_id}": ON_CALL,
    "GET /metrics/combinations": MANAGERS,
    "GET /metrics/series": MANAGERS,
    "GET /metrics/tools": MANAGERS,
    "GET /records": ANY_MEMBER,
    "GET /rollouts": MANAGERS,
    "POST /rollouts": MANAGERS,
    "GET /rollouts/{plan_id}": MANAGERS,
    "POST /rollouts/{plan_id}/{action}": MANAGERS,
    "POST /runs": ANY_MEMBER,
    "GET /runs/{run_id}": ANY_MEMBER,
    "POST /runs/{run_id}/finish": ANY_MEMBER,
    "GET /thresholds": MANAGERS,
    "POST /thresholds": MANAGERS,
    "GET /tools": ANY_MEMBER,
    "POST /tools": ANY_MEMBER,
    "POST /tools/classify": ANY_MEMBER,
    "POST /tools/import-mcp": ANY_MEMBER,
    "GET /tools/{name}": ANY_MEMBER,
    "PUT /tools/{name}/key-fields": ANY_MEMBER,
}


def test_every_operation_says_who_may_use_it() -> None:
    served = {operation.route for operation in OPERATIONS}
    assert served == set(WHO_MAY), {
        "served, not in WHO_MAY": sorted(served - set(WHO_MAY)),
        "in WHO_MAY, not served": sorted(set(WHO_MAY) - served),
    }


@pytest.mark.parametrize("role", [None, *Role], ids=lambda role: str(role or "no-role"))
def test_a_persons_token_is_refused_what_their_role_may_not_do(
    tenant: Tenant, role: Role | None
) -> None:
    token = _person(tenant, role)
    wrong = []
    for operation in OPERATIONS:
        status, code = _request(token, operation)
        refused = (status, code) == (403, "FORBIDDEN")
        if refused == (role in WHO_MAY[operation.route]) or status == 401:
            wrong.append(f"{operation} -> {status} {code}")
    assert not wrong, f"a {role or 'member without a role'}: {wrong}"


def test_a_runtimes_token_is_refused_what_only_a_role_may_do(tenant: Tenant) -> None:
    token = _service(tenant, "runtime", RUNTIME_SCOPES)
    answered = [
        str(operation)
        for operation in OPERATIONS
        if WHO_MAY[operation.route] != ANY_MEMBER
        and _request(token, operation) != (403, "FORBIDDEN")
    ]
    assert not answered, answered


def test_a_role_changed_changes_what_the_token_may_do_at_once(tenant: Tenant) -> None:
    token = _person(tenant, Role.MANAGER)
    halt = next(op for op in OPERATIONS if op.path.endswith("/halt"))
    assert _request(token, halt)[0] != 403  # allowed (and refused for its empty body)
    Membership.objects.filter(tenant=tenant).update(role=Role.OPERATOR)
    assert _request(token, halt) == (403, "FORBIDDEN")


def test_a_service_account_token_can_never_be_given_the_decision_of_approvals(
    tenant: Tenant,
) -> None:
    with pytest.raises(ValueError, match="never decide approvals"):
        ApiToken.issue(tenant=tenant, name="bot", scopes=[Scope.APPROVALS_DECIDE])
