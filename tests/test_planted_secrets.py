"""Secrets planted by shape in every text a caller or an operator gives the ledger never come
back out: not in the API's answers, the console's pages and CSV exports, the database's rows,
the logs or the spans (``ledger.redaction``; DESIGN section 10).

Each example plants in every text a secret of every shape (a PEM private key, a URL's
credentials, a ``token=``-like parameter, a value given to a secret's name, as text and as JSON
in text, an authorization header), in an order, with names and surroundings Hypothesis draws
(a field of one short line takes one shape, drawn), and in every JSON value a secret under a
secret's name and one as a named header. It drives one run of calls and the operators',
approvers' and managers' work on them through the real API and console, then reads everything
back. Identifiers (run, step, user and business object ids) are the key and are kept as given,
so nothing is planted in them. Each example makes about a hundred requests: the profile's run
takes a hundredth of its examples (three in ``ci``), and a failure is not shrunk."""

from __future__ import annotations

import itertools
import json
import logging
import string
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from django.apps import apps
from django.db import transaction
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pythonjsonlogger.json import JsonFormatter

from ledger import combinations
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    DeclaredCompensation,
    IdempotencyRecord,
    LedgerEntry,
    RolloutPlan,
    Run,
    Tool,
    VersionCombination,
)
from reconcile.models import CompensationAdapter, DownstreamAdapter
from reconcile.services import reconcile_record
from tests.api.conftest import ApiClient, client_for
from tests.console.conftest import make_user, sha, signed_in
from tests.factories import make_tool

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_downstreams")]

EXAMPLES = max(1, settings.default.max_examples // 100)

_BODY = st.text(alphabet=string.ascii_letters + string.digits, min_size=16, max_size=40)
SECRET_NAMES = st.sampled_from(
    [
        "pwd",
        "passwd",
        "password",
        "secret",
        "client_secret",
        "api_key",
        "apikey",
        "access_token",
        "refresh_token",
        "authorization",
        "private_key",
        "X-Api-Key",
    ]
)
PARAMETERS = st.sampled_from(
    ["token", "access_token", "api_key", "apikey", "key", "secret", "password", "sig", "auth"]
)
SHAPES = ("pem", "url", "parameter", "named", "quoted", "header")
#: What comes between a text's parts (on one line: no tab or newline, control characters).
GAPS = [" ", " see ", " note: ", " (", " failed; ", ' "', ", "]


def _pem(secret: str, *, one_line: bool) -> str:
    """A private key whose middle line is ``secret`` (a line of a PEM body is 64 characters)."""
    label = "RSA PRIVATE KEY" if len(secret) % 2 else "PRIVATE KEY"
    body = ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", secret, "AoGBAMc3yc3Ov5nR"]
    return (" " if one_line else "\n").join(
        [f"-----BEGIN {label}-----", *body, f"-----END {label}-----"]
    )


def _shaped(draw: st.DrawFn, shape: str, secret: str, *, one_line: bool) -> str:
    """``secret`` written in ``shape``, one the ledger must recognise."""
    if shape == "pem":
        return _pem(secret, one_line=one_line)
    if shape == "url":
        return f"https://deploy:{secret}@git.example.com/org/repo.git"
    if shape == "parameter":
        return f"GET /api/v1/records?page=2&{draw(PARAMETERS)}={secret}&x=1"
    if shape == "named":
        return f"{draw(SECRET_NAMES)}: {secret}"
    if shape == "quoted":
        return json.dumps({"user": "bob", draw(SECRET_NAMES): secret})
    return f"Authorization: Basic {secret}"


@dataclass
class Planted:
    """What one example planted: each secret with what it was (field and shape), and a word
    stored beside each text, to show the text was stored (so a secret missing from the rows is
    missing for being redacted)."""

    secrets: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)

    def secret(self, draw: st.DrawFn, what: str) -> str:
        """A secret no other is part of (numbered), and that no hash, id or key the ledger
        writes has (``Q``)."""
        secret = f"Q{len(self.secrets):03d}q{draw(_BODY)}"
        self.secrets[secret] = what
        return secret

    def text(self, draw: st.DrawFn, name: str, *, one_line: bool = False) -> str:
        """A text with a secret of every shape, in an order drawn; ``one_line`` (a field of
        200 characters without control characters): one secret, of a shape drawn."""
        tag = f"planted-{name}"
        self.tags.append(tag)
        shapes = [draw(st.sampled_from(SHAPES))] if one_line else draw(st.permutations(SHAPES))
        gaps = st.sampled_from(GAPS if one_line else [*GAPS, "\t", "\n", "\n\n"])
        parts = [tag]
        for shape in shapes:
            secret = self.secret(draw, f"{name}: {shape}")
            parts += [draw(gaps), _shaped(draw, shape, secret, one_line=one_line)]
        return "".join(parts)

    def json(self, draw: st.DrawFn, name: str) -> dict[str, Any]:
        """A JSON value with secrets in texts, under a secret's name and as a named header."""
        return {
            "id": f"planted-{name}-id",
            "note": self.text(draw, name),
            draw(SECRET_NAMES): self.secret(draw, f"{name}: under a secret's name"),
            "nested": {"items": [self.text(draw, f"{name}-nested")]},
            "headers": [
                {
                    "name": "Authorization",
                    "value": f"Bearer {self.secret(draw, f'{name}: a header')}",
                }
            ],
        }


class Seen:
    """Everything the example's readers could see, by where they saw it."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def add(self, where: str, response: Any) -> Any:
        if getattr(response, "streaming", False):
            body = b"".join(response.streaming_content)
        else:
            body = response.content
        self.texts[f"{where} ({response.status_code})"] = body.decode()
        return response

    def leaks(self, secrets: dict[str, str]) -> list[tuple[str, str]]:
        """(where, what) for every secret seen."""
        return [
            (where, what)
            for where, text in self.texts.items()
            for secret, what in secrets.items()
            if secret in text
        ]


@dataclass
class Console:
    operator: Any
    approver: Any


@pytest.fixture
def console(tenant, django_user_model) -> Console:
    return Console(
        operator=signed_in(make_user(django_user_model, "olga", tenant, "admin")),
        approver=signed_in(make_user(django_user_model, "ben", tenant, "approver")),
    )


@pytest.fixture
def stage(tenant, sandbox) -> dict[str, Any]:
    """The tools, the look-up adapter, and the declared compensation every example uses."""
    orders = make_tool(tenant, "create_order")
    cancel = make_tool(tenant, "cancel_order")
    make_tool(tenant, "write_file")
    make_tool(tenant, "ship_order")
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=orders,
        url_template=f"{sandbox.url}/orders/objects/by-key/{{key}}",
        found_statuses=[200],
        not_found_statuses=[404],
        grace_seconds=0,
    )
    CompensationAdapter.objects.create(
        tenant=tenant, tool=cancel, url_template="http://127.0.0.1:9/orders/{order_id}/cancel"
    )
    DeclaredCompensation.objects.create(
        tenant=tenant,
        tool=orders,
        compensating_tool=cancel,
        arguments={"order_id": "result.id"},
        declared_by="test",
    )
    # Each example's keys are its own: the sandbox keeps what it was sent across examples.
    return {"sandbox": sandbox, "examples": itertools.count()}


def _ok(response: Any, *statuses: int) -> Any:
    assert response.status_code in (statuses or (200, 201, 302)), response.content[:2000]
    return response


def _call(api: ApiClient, seen: Seen, run_id: str, step: str, tool: str, input: Any, **extra):
    answer = seen.add(
        f"POST /calls {step}",
        api.call(tool, input, run_id=run_id, step_id=step, business_object_id=step, **extra),
    )
    body = _ok(answer).json()
    assert body["decision"] == "execute", body
    return body


def _report(api: ApiClient, seen: Seen, call: dict[str, Any], body: dict[str, Any]) -> None:
    path = f"/calls/{call['call_id']}/complete"
    _ok(seen.add(f"POST {path}", api.post(path, {"fencing_token": 1, **body})))


def _act(console: Console, seen: Seen, record: IdempotencyRecord, action: str, note: str):
    path = f"/unknown/{record.pk}/action"
    _ok(seen.add(path, console.operator.post(path, {"action": action, "note": note})), 302)


def _drive(data: st.DataObject, api: ApiClient, console: Console, stage, seen: Seen) -> Planted:
    """One run of calls and everything people do with them, each given planted secrets."""
    draw, planted = data.draw, Planted()
    n = next(stage["examples"])
    run_id = f"run-{n}"
    _ok(seen.add("POST /runs", api.post("/runs", {"run_id": run_id, "user_id": "u1"})))

    # A call's input, its result and evidence; a failure's message.
    done = _call(api, seen, run_id, f"done-{n}", "create_order", planted.json(draw, "input"))
    _report(
        api,
        seen,
        done,
        {
            "outcome": "succeeded",
            "result": {**planted.json(draw, "result"), "id": f"ord-{n}"},
            "evidence": planted.json(draw, "evidence"),
        },
    )
    failed = _call(api, seen, run_id, f"failed-{n}", "create_order", {"cart": n})
    message = planted.text(draw, "error-message")
    _report(api, seen, failed, {"outcome": "failed", "error": {"code": "E", "message": message}})

    # Unknown outcomes: settled by an operator, or escalated, or found by a look-up.
    unknown = {}
    for step in ("marked-succeeded", "marked-failed", "escalated", "looked-up"):
        call = _call(api, seen, run_id, f"{step}-{n}", "create_order", {"cart": step})
        _report(api, seen, call, {"outcome": "uncertain"})
        unknown[step] = IdempotencyRecord.objects.get(key=call["idempotency_key"])
    _act(console, seen, unknown["marked-succeeded"], "succeeded", planted.text(draw, "evidence"))
    _act(console, seen, unknown["marked-failed"], "failed", planted.text(draw, "not-happened"))
    _act(console, seen, unknown["escalated"], "escalate", planted.text(draw, "escalation"))
    found = planted.json(draw, "downstream")
    made = httpx.post(
        f"{stage['sandbox'].url}/orders/objects",
        json=found,
        headers={"Idempotency-Key": unknown["looked-up"].key},
    )
    assert made.status_code == 201, made.text
    assert reconcile_record(unknown["looked-up"].pk, worker="w") == "succeeded"

    # An approval policy, whose reason approvers and the model read, asking before a call runs
    # (a reason is at most 500 characters: one secret in it).
    form = {"name": f"ship-{n}", "reason": planted.text(draw, "policy", one_line=True)}
    _ok(seen.add("/policies/", console.operator.post("/policies/", {**form, "tool": "ship_order"})))
    step = f"ship-{n}"
    asked = api.call(
        "ship_order", {"cart": n}, run_id=run_id, step_id=step, business_object_id=step
    )
    assert _ok(seen.add("POST /calls ship", asked)).json()["decision"] == "approval_required"

    # A conditional write whose replay asks for an approval, rejected with a reason.
    plan = {
        "workspace": "repo",
        "path": f"settings-{n}.env",
        "before_hash": sha("a"),
        "after_hash": sha("b"),
        "diff": f"+{planted.text(draw, 'diff')}\n",
        "patch_ref": planted.text(draw, "patch", one_line=True),
    }
    target = {"path": plan["path"]}
    write = _call(api, seen, run_id, f"write-{n}", "write_file", target, write_plan=plan)
    _report(api, seen, write, {"outcome": "uncertain"})
    replay = f"/calls/{write['call_id']}/replay"
    _ok(seen.add(replay, api.post(replay, {"current_hash": sha("a")})))
    approval = ApprovalRequest.objects.get(record__key=write["idempotency_key"])
    path = f"/approvals/{approval.pk}/decide"
    reason = planted.text(draw, "rejection")
    _ok(seen.add(path, console.approver.post(path, {"decision": "reject", "reason": reason})))

    # The succeeded order compensated: requested by the operator, decided by the approver.
    record = IdempotencyRecord.objects.get(key=done["idempotency_key"])
    path = f"/compensations/records/{record.pk}/"
    _ok(seen.add(path + "request", console.operator.post(path + "request")))
    reason = planted.text(draw, "compensation")
    decided = console.approver.post(path + "decide", {"decision": "reject", "reason": reason})
    _ok(seen.add(path + "decide", decided), 302)

    # The run finished with a reason; a tool's classification overridden with one.
    finish = f"/runs/{run_id}/finish"
    reason = planted.text(draw, "finished", one_line=True)
    _ok(seen.add(finish, api.post(finish, {"termination_reason": reason})))
    tool = Tool.objects.get(tenant=api.tenant, name="cancel_order")
    path = f"/tools/{tool.pk}/override"
    reason = planted.text(draw, "override")
    _ok(
        seen.add(path, console.operator.post(path, {"idempotency": "idempotent", "reason": reason}))
    )

    # Two combinations: the newer rolled back, then resumed; each with a reason.
    versions = {"model": "m", "prompt": f"p{n}", "rules": "r", "tool_schema": "t"}
    ids = {"tenant": api.tenant, "actor": "x", "source": "api"}
    good, _ = combinations.create_combination(
        **ids, label=f"good-{n}", data_version="1", **versions
    )
    bad, _ = combinations.create_combination(**ids, label=f"bad-{n}", data_version="2", **versions)
    for combination in (good, bad):
        combinations.activate(**ids, combination_id=combination.pk)
    path = f"/combinations/{bad.pk}/rollback"
    reason = planted.text(draw, "rollback")
    _ok(seen.add(path, console.operator.post(path, {"reason": reason})), 200)
    path = f"/combinations/{bad.pk}/resume"
    reason = planted.text(draw, "resume")
    _ok(seen.add(path, console.operator.post(path, {"reason": reason})), 302)
    path = f"/combinations/{good.pk}/halt"
    reason = planted.text(draw, "halt")
    _ok(seen.add(path, console.operator.post(path, {"reason": reason})), 302)

    # A rollout of a third combination, aborted with a reason.
    candidate, _ = combinations.create_combination(
        **ids, label=f"next-{n}", data_version="3", **versions
    )
    steps = [{"share_bp": bp, "min_minutes": 1, "min_samples": 1} for bp in (1000, 10_000)]
    started = api.post("/rollouts", {"candidate_id": candidate.pk, "steps": steps})
    plan = _ok(seen.add("POST /rollouts", started), 201).json()
    path = f"/rollouts/{plan['id']}/action"
    reason = planted.text(draw, "abort")
    _ok(seen.add(path, console.operator.post(path, {"action": "abort", "reason": reason})), 302)
    return planted


def _read_back(api: ApiClient, console: Console, seen: Seen) -> None:
    """Every answer, page and export that shows what the example wrote."""
    tenant = api.tenant
    for entry in LedgerEntry.objects.filter(tenant=tenant):
        seen.add(f"GET /calls/{entry.call_id}", api.get(f"/calls/{entry.call_id}"))
        seen.add(f"call page {entry.pk}", console.operator.get(f"/ledger/calls/{entry.pk}/"))
    for record in IdempotencyRecord.objects.filter(tenant=tenant):
        seen.add(f"GET /records {record.pk}", api.get("/records", key=record.key))
        seen.add(f"record page {record.pk}", console.operator.get(f"/ledger/records/{record.pk}/"))
        if record.state == "unknown":
            seen.add(f"unknown page {record.pk}", console.operator.get(f"/unknown/{record.pk}/"))
    for compensated in IdempotencyRecord.objects.filter(tenant=tenant, compensation__isnull=False):
        page = f"/compensations/records/{compensated.pk}/"
        seen.add(f"compensation page {compensated.pk}", console.approver.get(page))
    for run in Run.objects.filter(tenant=tenant):
        seen.add(f"GET /runs/{run.run_id}", api.get(f"/runs/{run.run_id}"))
        seen.add(f"run page {run.pk}", console.operator.get(f"/ledger/runs/{run.pk}/"))
    for plan in RolloutPlan.objects.filter(tenant=tenant):
        seen.add(f"GET /rollouts/{plan.pk}", api.get(f"/rollouts/{plan.pk}"))
        seen.add(f"rollout page {plan.pk}", console.operator.get(f"/rollouts/{plan.pk}/"))
    for approval in ApprovalRequest.objects.filter(tenant=tenant):
        seen.add(f"approval page {approval.pk}", console.approver.get(f"/approvals/{approval.pk}/"))
        _ok(seen.add(f"GET /approvals/{approval.pk}", api.get(f"/approvals/{approval.pk}")), 200)
    for state in ("open", "rejected"):
        _ok(seen.add(f"GET /approvals {state}", api.get("/approvals", state=state)), 200)
    _ok(seen.add("GET /approval-policies", api.get("/approval-policies")), 200)
    for combination in VersionCombination.objects.filter(tenant=tenant):
        page = f"/combinations/{combination.pk}/"
        seen.add(f"combination page {combination.pk}", console.operator.get(page))
    for event in AuditEvent.objects.filter(tenant=tenant, detail__contains="planted-"):
        seen.add(f"audit page {event.pk}", console.operator.get(f"/audit/{event.pk}/"))
    for page in ("/", "/unknown/", "/approvals/", "/ledger/", "/ledger/runs/", "/audit/"):
        seen.add(page, console.operator.get(page))
    for page in ("/combinations/", "/rollouts/", "/tools/", "/on-call/", "/policies/"):
        seen.add(page, console.operator.get(page))
    for page in ("/ledger/", "/ledger/runs/", "/unknown/", "/approvals/", "/combinations/"):
        seen.add(f"{page} csv", console.operator.get(page, {"format": "csv"}))
    for page in ("/audit/", "/tools/"):
        seen.add(f"{page} csv", console.operator.get(page, {"format": "csv"}))


def _rows() -> str:
    """Every row of every table of the ledger's apps, as text."""
    models = [
        m
        for app in ("ledger", "reconcile", "console")
        for m in apps.get_app_config(app).get_models()
    ]
    return json.dumps({m.__name__: list(m.objects.values()) for m in models}, default=str)


# A failure is reported as drawn: shrinking examples of seconds each takes many minutes.
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_planted_secret_is_never_shown_stored_logged_or_traced(
    tenant, stage, console, spans, caplog, data
) -> None:
    api = client_for(tenant)
    caplog.set_level(logging.DEBUG)
    with transaction.atomic():
        spans.clear()
        caplog.clear()
        seen = Seen()
        planted = _drive(data, api, console, stage, seen)
        _read_back(api, console, seen)
        rows = _rows()
        seen.texts["database rows"] = rows
        formatter = JsonFormatter("%(levelname)s %(name)s %(message)s")
        seen.texts["logs"] = "\n".join(formatter.format(r) for r in caplog.records)
        seen.texts["spans"] = "\n".join(span.to_json() for span in spans.get_finished_spans())
        transaction.set_rollback(True)
    assert [tag for tag in planted.tags if tag not in rows] == [], "a planted text was not stored"
    leaks = seen.leaks(planted.secrets)
    assert not leaks, (
        f"{len(leaks)} secrets seen: {sorted({what for _, what in leaks})} "
        f"in {sorted({where for where, _ in leaks})[:12]}"
    )
