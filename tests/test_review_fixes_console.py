"""Found by an independent review: rollback never revives a halted combination; look-ups
never carry one tenant's cookies to another; odd digits in console parameters are bad input."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ledger.errors import Conflict, InvalidInput
from ledger.models import VersionCombination
from ledger.services import combinations
from reconcile.adapters import http_client
from tests.console.conftest import make_user, signed_in

VERSIONS = {"model": "m", "rules": "r", "tool_schema": "t", "data_version": "d"}


def _combo(tenant, label):
    combo, _ = combinations.create_combination(
        tenant=tenant, label=label, actor="x", source="api", prompt=label, **VERSIONS
    )
    return combo


@pytest.mark.django_db
def test_a_rollback_never_turns_a_halted_combination_back_on(tenant) -> None:
    good, bad, spare = _combo(tenant, "good"), _combo(tenant, "bad"), _combo(tenant, "spare")
    combinations.activate(tenant=tenant, combination_id=good.pk, actor="x", source="api")
    combinations.activate(tenant=tenant, combination_id=bad.pk, actor="x", source="api")
    combinations.halt(tenant=tenant, combination_id=good.pk, actor="x", source="api", reason="r")
    with pytest.raises(Conflict):  # its previous is halted: a human names what to restore
        combinations.rollback(
            tenant=tenant, combination_id=bad.pk, actor="x", source="api", reason="r"
        )
    with pytest.raises(InvalidInput):
        combinations.rollback(
            tenant=tenant,
            combination_id=bad.pk,
            actor="x",
            source="api",
            reason="r",
            restore_id=good.pk,
        )
    assert VersionCombination.objects.get(pk=good.pk).state == "halted"
    assert VersionCombination.objects.get(pk=bad.pk).state == "active"
    combinations.rollback(
        tenant=tenant,
        combination_id=bad.pk,
        actor="x",
        source="api",
        reason="r",
        restore_id=spare.pk,
    )
    states = dict(VersionCombination.objects.values_list("label", "state"))
    assert states == {"good": "halted", "bad": "halted", "spare": "active"}


def test_look_ups_keep_no_cookies_between_requests() -> None:
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Cookie"))
            self.send_response(200)
            self.send_header("Set-Cookie", "session=tenant-a; Path=/")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        http_client().get(f"{base}/tenant-a/lookup/k1", timeout=5)
        http_client().get(f"{base}/tenant-b/lookup/k2", timeout=5)
    finally:
        server.shutdown()
    assert seen == [None, None]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "/audit/?before=²",
        "/unknown/bulk?ids=²&action=lookup",
        "/unknown/bulk?ids=99999999999999999999999&action=lookup",
        "/unknown/?after=²",
        "/ledger/runs/RUN/?after=²",
        "/combinations/COMBO/rollback?restore=²",
    ],
)
def test_odd_digits_in_parameters_are_bad_input_not_a_500(django_user_model, tenant, path):
    from ledger.models import Run

    run = Run.objects.create(tenant=tenant, run_id="r1", user_id="u")
    combo = _combo(tenant, "c")
    root = signed_in(make_user(django_user_model, "root", tenant, "admin"))
    url = path.replace("RUN", str(run.pk)).replace("COMBO", str(combo.pk))
    assert root.get(url, secure=True).status_code in (200, 302, 400, 404)
