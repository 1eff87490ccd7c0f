"""The sandbox downstreams are real HTTP services that honour keys and inject faults."""

from __future__ import annotations

import httpx
import pytest

from sandbox.server import SandboxServer
from tests.sandbox_fixtures import arm


def _create(
    server: SandboxServer, key: str | None, reference: str = "cart-1", timeout: float = 5
) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return httpx.post(
        f"{server.url}/orders/objects",
        json={"reference": reference},
        headers=headers,
        timeout=timeout,
    )


def _stats(server: SandboxServer) -> dict:
    return httpx.get(f"{server.url}/orders/stats", timeout=5).json()


def test_a_repeated_key_returns_the_first_object(sandbox: SandboxServer) -> None:
    first = _create(sandbox, "k1")
    again = _create(sandbox, "k1")
    assert first.status_code == 201 and again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert first.json()["id"] == again.json()["id"]
    assert _stats(sandbox)["per_key"] == {"k1": 1}


def test_without_a_key_every_call_is_a_new_side_effect(sandbox: SandboxServer) -> None:
    _create(sandbox, None)
    _create(sandbox, None)
    assert _stats(sandbox)["per_reference"] == {"cart-1": 2}


def test_lookup_by_key(sandbox: SandboxServer) -> None:
    created = _create(sandbox, "k1").json()
    found = httpx.get(f"{sandbox.url}/orders/objects/by-key/k1", timeout=5)
    assert found.status_code == 200 and found.json()["id"] == created["id"]
    assert httpx.get(f"{sandbox.url}/orders/objects/by-key/nope", timeout=5).status_code == 404


def test_timeout_after_commit_keeps_the_side_effect(sandbox: SandboxServer) -> None:
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=2)
    with pytest.raises(httpx.ReadTimeout):
        _create(sandbox, "k1", timeout=0.5)
    assert _stats(sandbox)["per_key"] == {"k1": 1}
    assert _create(sandbox, "k1").status_code == 200


def test_reset_happens_before_any_side_effect(sandbox: SandboxServer) -> None:
    arm(sandbox, service="orders", mode="reset")
    with pytest.raises(httpx.TransportError):
        _create(sandbox, "k1")
    assert _stats(sandbox)["objects"] == 0


def test_reset_after_commit_keeps_the_side_effect(sandbox: SandboxServer) -> None:
    arm(sandbox, service="orders", mode="reset_after_commit")
    with pytest.raises(httpx.TransportError):
        _create(sandbox, "k1")
    assert _stats(sandbox)["objects"] == 1


def test_a_body_cut_short_after_commit_keeps_the_side_effect(sandbox: SandboxServer) -> None:
    arm(sandbox, service="orders", mode="truncated_after_commit")
    with pytest.raises(httpx.RemoteProtocolError):
        _create(sandbox, "k1")
    assert _stats(sandbox)["per_key"] == {"k1": 1}
    assert _create(sandbox, "k1").status_code == 200


def test_5xx_and_malformed_bodies(sandbox: SandboxServer) -> None:
    arm(sandbox, service="orders", mode="error_5xx")
    assert _create(sandbox, "k1").status_code == 503
    assert _stats(sandbox)["objects"] == 0
    arm(sandbox, service="orders", mode="malformed")
    response = _create(sandbox, "k2")
    with pytest.raises(ValueError):
        response.json()
    assert _stats(sandbox)["objects"] == 1


def test_bad_fault_requests_are_refused(sandbox: SandboxServer) -> None:
    assert httpx.post(f"{sandbox.url}/_faults", json={"mode": "explode"}).status_code == 400
    assert (
        httpx.post(f"{sandbox.url}/_faults", json={"mode": "latency", "count": 0}).status_code
        == 400
    )


def test_workspace_files_are_confined(sandbox: SandboxServer) -> None:
    written = httpx.put(f"{sandbox.url}/workspace/files/src/a.txt", json={"content": "hi"})
    assert written.status_code == 200
    read = httpx.get(f"{sandbox.url}/workspace/files/src/a.txt").json()
    assert read["content"] == "hi" and read["sha256"] == written.json()["sha256"]
    escape = httpx.get(f"{sandbox.url}/workspace/files/..%2F..%2Fetc%2Fpasswd")
    assert escape.status_code in (400, 404)


def test_create_requests_and_workspace_writes_are_counted(sandbox: SandboxServer) -> None:
    _create(sandbox, "k1")
    _create(sandbox, "k1")
    assert _stats(sandbox)["create_requests_per_key"] == {"k1": 2}
    assert _stats(sandbox)["per_key"] == {"k1": 1}
    httpx.put(f"{sandbox.url}/workspace/files/a.txt", json={"content": "x"}, timeout=5)
    stats = httpx.get(f"{sandbox.url}/workspace/stats", timeout=5).json()
    assert stats == {"writes_per_path": {"a.txt": 1}, "writes": 1}


def _cancel(server: SandboxServer, object_id: str, key: str | None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return httpx.post(
        f"{server.url}/orders/objects/{object_id}/cancel", json={}, headers=headers, timeout=5
    )


def test_a_cancel_is_keyed_and_counted_once_per_object(sandbox: SandboxServer) -> None:
    order = _create(sandbox, "k1").json()
    first = _cancel(sandbox, order["id"], "k1:compensate")
    again = _cancel(sandbox, order["id"], "k1:compensate")
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    other_key = _cancel(sandbox, order["id"], "another-key")
    assert other_key.status_code == 409 and other_key.json()["error"] == "already_cancelled"
    stats = _stats(sandbox)
    assert stats["cancellations_per_object"] == {order["id"]: 1}
    assert stats["cancel_requests_per_key"] == {"k1:compensate": 2, "another-key": 1}


def test_cancelling_an_unknown_object_is_404(sandbox: SandboxServer) -> None:
    assert _cancel(sandbox, "ord_missing", "k").status_code == 404
    assert _stats(sandbox)["cancellations"] == 0


def test_a_cancellation_is_looked_up_by_key(sandbox: SandboxServer) -> None:
    order = _create(sandbox, "k1").json()
    missing = httpx.get(f"{sandbox.url}/orders/cancellations/by-key/k1:compensate", timeout=5)
    assert missing.status_code == 404
    assert missing.json() == {"error": "not_found", "idempotency_key": "k1:compensate"}
    cancelled = _cancel(sandbox, order["id"], "k1:compensate").json()
    found = httpx.get(f"{sandbox.url}/orders/cancellations/by-key/k1:compensate", timeout=5)
    assert found.status_code == 200 and found.json()["id"] == cancelled["id"]


def test_a_cancel_whose_response_is_lost_still_happened(sandbox: SandboxServer) -> None:
    order = _create(sandbox, "k1").json()
    arm(sandbox, service="orders", operation="cancel", mode="reset_after_commit")
    with pytest.raises(httpx.TransportError):
        _cancel(sandbox, order["id"], "k1:compensate")
    assert _stats(sandbox)["cancellations_per_object"] == {order["id"]: 1}
