"""The API's role-by-operation matrix, generated from the routes: every operation names the scope
it needs, and every kind of token is refused (403) exactly where it lacks that scope. A new
operation is covered by default, and one that names no scope fails here."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import get_resolver

from ledger.api import api
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

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def _operations() -> Iterator[Operation]:
    """Every operation as served: the routers as the API bound them, each operation with the
    auth it inherited."""
    get_resolver().url_patterns  # noqa: B018 - the URLconf binds the routers
    for router in api._get_bound_routers():
        for path, view in router.path_operations.items():
            url = _filled(f"/api/v1{router.prefix}{path}")
            for operation in view.operations:
                scopes = [
                    callback.scope
                    for callback in operation.auth_callbacks
                    if isinstance(callback, TokenAuth)
                ]
                for method in operation.methods:
                    yield Operation(method, url, scopes[0] if len(scopes) == 1 else None)


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


def test_manager_only_operations_are_refused_to_operators_approvers_and_runtimes(
    tenant: Tenant,
) -> None:
    manager_only = [op for op in OPERATIONS if op.scope in (Scope.LIFECYCLE, Scope.POLICIES)]
    assert manager_only
    tokens = {
        "operator": _person(tenant, Role.OPERATOR),
        "approver": _person(tenant, Role.APPROVER),
        "runtime": _service(tenant, "runtime", RUNTIME_SCOPES),
    }
    answered = [
        f"{who}: {operation}"
        for who, token in tokens.items()
        for operation in manager_only
        if _request(token, operation) != (403, "FORBIDDEN")
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
