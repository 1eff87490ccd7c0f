"""Fake third-party downstreams: orders, payments, email, an issue tracker and a file workspace.

A real HTTP server (stdlib, no Django) so the ledger and the client are tested against real
sockets, with faults injected on demand:

- ``latency``: wait ``latency_ms`` before answering;
- ``timeout_after_commit``: commit the side effect, then hold the connection for
  ``hang_seconds`` and close it without a response (the caller times out);
- ``error_5xx``: answer 503 before doing anything;
- ``reset``: reset the TCP connection (RST) before doing anything;
- ``reset_after_commit``: commit, then reset the connection;
- ``truncated_after_commit``: commit, then send the headers and half the body, and close
  (the caller reads a body cut short);
- ``malformed``: commit, then answer with a body that is not JSON.

Every service honours an ``Idempotency-Key`` header: a repeated key returns the first object
(and ``Idempotent-Replayed: true``) instead of creating another. Objects can be looked up by
key, and ``/{service}/stats`` counts side effects per key and per business reference, which is
what the acceptance tests judge by.

An object is undone by ``POST /{service}/objects/{id}/cancel`` (a compensation), keyed the same
way: a repeated key returns the first cancellation, a second cancellation of the same object
under another key is refused (409). Cancellations are looked up by key at
``/{service}/cancellations/by-key/{key}`` and counted per object in the stats.

Run it with ``python -m sandbox --port 8025``; ``manage.py demo_agent`` and the tests start
their own on a free port.
"""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

SERVICES = ("orders", "payments", "email", "issues")
FAULT_MODES = (
    "latency",
    "timeout_after_commit",
    "error_5xx",
    "reset",
    "reset_after_commit",
    "truncated_after_commit",
    "malformed",
)
MAX_BODY = 1024 * 1024


@dataclass
class Fault:
    mode: str
    service: str = "*"  # a service name or "*"
    operation: str = "create"  # create, cancel, lookup or "*"
    remaining: int = 1
    latency_ms: int = 0
    hang_seconds: float = 5.0

    def matches(self, service: str, operation: str) -> bool:
        return self.service in ("*", service) and self.operation in ("*", operation)


@dataclass
class State:
    """Everything the sandbox knows, guarded by one lock."""

    objects: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {s: [] for s in SERVICES}
    )
    by_key: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    lookups: Counter[tuple[str, str]] = field(default_factory=Counter)
    # Create requests per key, new or answered from the first object: shows how often a caller
    # asked for the side effect, which the per-key dedup above would otherwise hide.
    creates: Counter[tuple[str, str]] = field(default_factory=Counter)
    writes: Counter[str] = field(default_factory=Counter)  # workspace writes per path
    cancellations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # by key
    cancel_requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_fault(self, service: str, operation: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(service, operation) and fault.remaining > 0:
                    fault.remaining -= 1
                    if fault.remaining == 0:
                        self.faults.remove(fault)
                    return fault
        return None

    def create(self, service: str, key: str | None, body: dict[str, Any]) -> tuple[dict, bool]:
        """The object for ``key`` (created now, or the one created before) and whether new."""
        with self.lock:
            if key:
                self.creates[(service, key)] += 1
            if key and (service, key) in self.by_key:
                return self.by_key[(service, key)], False
            obj = {
                "id": f"{service[:3]}_{uuid.uuid4().hex[:12]}",
                "service": service,
                "idempotency_key": key,
                "reference": str(body.get("reference", "")),
                "payload": body,
                "created_at": time.time(),
            }
            self.objects[service].append(obj)
            if key:
                self.by_key[(service, key)] = obj
            return obj, True

    def cancel(self, service: str, object_id: str, key: str | None) -> tuple[int, dict]:
        """Cancel object ``object_id``: (status, the cancellation or an error body)."""
        with self.lock:
            if key:
                self.cancel_requests[(service, key)] += 1
                if (service, key) in self.cancellations:
                    return 200, self.cancellations[(service, key)]
            target = next((o for o in self.objects[service] if o["id"] == object_id), None)
            if target is None:
                return 404, {"error": "not_found", "id": object_id}
            if target.get("cancelled_by"):
                return 409, {"error": "already_cancelled", "id": object_id}
            cancellation_id = f"can_{uuid.uuid4().hex[:12]}"
            cancellation: dict[str, Any] = {
                "id": cancellation_id,
                "service": service,
                "object_id": object_id,
                "idempotency_key": key,
                "created_at": time.time(),
            }
            target["cancelled_by"] = cancellation_id
            self.cancellations[(service, key or cancellation_id)] = cancellation
            return 201, cancellation

    def stats(self, service: str) -> dict[str, Any]:
        with self.lock:
            objects = list(self.objects[service])
        per_key = Counter(o["idempotency_key"] for o in objects if o["idempotency_key"])
        per_reference = Counter(o["reference"] for o in objects if o["reference"])
        with self.lock:
            lookups = {key: n for (svc, key), n in self.lookups.items() if svc == service}
            creates = {key: n for (svc, key), n in self.creates.items() if svc == service}
            cancelled = Counter(
                c["object_id"] for (svc, _key), c in self.cancellations.items() if svc == service
            )
            cancel_requests = {
                key: n for (svc, key), n in self.cancel_requests.items() if svc == service
            }
        return {
            "service": service,
            "objects": len(objects),
            "per_key": dict(per_key),
            "per_reference": dict(per_reference),
            "max_per_key": max(per_key.values(), default=0),
            "max_per_reference": max(per_reference.values(), default=0),
            "lookups_per_key": lookups,
            "create_requests_per_key": creates,
            "cancellations": sum(cancelled.values()),
            "cancellations_per_object": dict(cancelled),
            "cancel_requests_per_key": cancel_requests,
        }

    def reset(self) -> None:
        with self.lock:
            for service in SERVICES:
                self.objects[service].clear()
            self.by_key.clear()
            self.faults.clear()
            self.requests.clear()
            self.lookups.clear()
            self.creates.clear()
            self.writes.clear()
            self.cancellations.clear()
            self.cancel_requests.clear()


class SandboxServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], workspace: Path) -> None:
        super().__init__(address, SandboxHandler)
        self.state = State()
        self.workspace = workspace.resolve()
        self.workspace.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        if isinstance(host, bytes):
            host = host.decode()
        return f"http://{host}:{port}"


class SandboxHandler(BaseHTTPRequestHandler):
    server: SandboxServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; without TCP_NODELAY the body waits for the
    # client's delayed ACK (about 40 ms on Linux) and every request looks 40 ms slower.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: tests and drills read the stats, not the access log

    # --- plumbing ---------------------------------------------------------------------------
    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._send(413, {"error": "body_too_large"})
            return None
        raw = self.rfile.read(length) if length else b"{}"
        try:
            data = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send(400, {"error": "invalid_json"})
            return None
        if not isinstance(data, dict):
            self._send(400, {"error": "body_must_be_an_object"})
            return None
        return data

    def _reset_connection(self) -> None:
        """Close with RST: the peer sees 'connection reset by peer'."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def _send_truncated(self, status: int, body: Any, headers: dict[str, str]) -> None:
        """Announce the whole body, send half of it and close: the peer's read ends early."""
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload[: len(payload) // 2])
        self.wfile.flush()
        self.close_connection = True

    def _hang_then_drop(self, fault: Fault) -> None:
        time.sleep(fault.hang_seconds)
        self._reset_connection()

    def _before(self, fault: Fault | None) -> bool:
        """Apply a fault that strikes before the side effect; False when the request ends."""
        if fault is None:
            return True
        if fault.mode == "latency":
            time.sleep(fault.latency_ms / 1000)
            return True
        if fault.mode == "error_5xx":
            self._send(503, {"error": "service_unavailable"})
            return False
        if fault.mode == "reset":
            self._reset_connection()
            return False
        return True

    def _after(
        self, fault: Fault | None, status: int, obj: dict[str, Any], headers: dict[str, str]
    ) -> None:
        """Answer after the side effect committed, or fail in the way the fault says."""
        mode = fault.mode if fault else ""
        if mode == "timeout_after_commit":
            assert fault is not None
            self._hang_then_drop(fault)
        elif mode == "reset_after_commit":
            self._reset_connection()
        elif mode == "truncated_after_commit":
            self._send_truncated(status, obj, headers)
        elif mode == "malformed":
            self._send(status, b'{"id": "' + obj["id"].encode() + b'", "truncat', headers)
        else:
            self._send(status, obj, headers)

    def _route(self) -> tuple[str, list[str], dict[str, list[str]]]:
        parsed = urlparse(self.path)
        parts = [unquote(p) for p in parsed.path.strip("/").split("/") if p]
        return parsed.path, parts, parse_qs(parsed.query)

    # --- verbs ------------------------------------------------------------------------------
    def do_GET(self) -> None:
        _path, parts, query = self._route()
        state = self.server.state
        if parts == ["healthz"]:
            return self._send(200, {"status": "ok"})
        if parts == ["workspace", "stats"]:
            with state.lock:
                writes = dict(state.writes)
            return self._send(200, {"writes_per_path": writes, "writes": sum(writes.values())})
        if len(parts) >= 2 and parts[0] == "workspace" and parts[1] == "files":
            return self._read_file("/".join(parts[2:]))
        if not parts or parts[0] not in SERVICES:
            return self._send(404, {"error": "unknown_service"})
        service = parts[0]
        state.requests[f"{service}:lookup"] += 1
        if parts[1:] == ["stats"]:
            return self._send(200, state.stats(service))
        if len(parts) == 4 and parts[2] == "by-key" and parts[1] in ("objects", "cancellations"):
            with state.lock:
                state.lookups[(service, parts[3])] += 1
            fault = state.take_fault(service, "lookup")
            if not self._before(fault):
                return None
            keyed = state.by_key if parts[1] == "objects" else state.cancellations
            obj = keyed.get((service, parts[3]))
            if obj is None:
                return self._send(404, {"error": "not_found", "idempotency_key": parts[3]})
            if fault and fault.mode == "malformed":
                return self._send(200, b"{not json")
            if fault and fault.mode.endswith("_after_commit"):
                return self._after(fault, 200, obj, {})
            return self._send(200, obj)
        if parts[1:] == ["objects"]:
            reference = (query.get("reference") or [""])[0]
            with state.lock:
                found = [
                    o
                    for o in state.objects[service]
                    if not reference or o["reference"] == reference
                ]
            return self._send(200, {"objects": found})
        return self._send(404, {"error": "not_found"})

    def do_POST(self) -> None:
        _path, parts, _query = self._route()
        state = self.server.state
        body = self._body()
        if body is None:
            return None
        if parts == ["_faults"]:
            return self._arm_fault(body)
        if parts == ["_reset"]:
            state.reset()
            return self._send(200, {"reset": True})
        if len(parts) == 4 and parts[0] in SERVICES and parts[1::2] == ["objects", "cancel"]:
            return self._cancel(parts[0], parts[2])
        if len(parts) != 2 or parts[0] not in SERVICES or parts[1] != "objects":
            return self._send(404, {"error": "not_found"})
        service = parts[0]
        state.requests[f"{service}:create"] += 1
        fault = state.take_fault(service, "create")
        if not self._before(fault):
            return None
        key = self.headers.get("Idempotency-Key") or None
        if key is not None and not (0 < len(key) <= 1024):
            return self._send(400, {"error": "invalid_idempotency_key"})
        obj, created = state.create(service, key, body)
        headers = {} if created else {"Idempotent-Replayed": "true"}
        return self._after(fault, 201 if created else 200, obj, headers)

    def do_PUT(self) -> None:
        _path, parts, _query = self._route()
        if len(parts) >= 3 and parts[:2] == ["workspace", "files"]:
            body = self._body()
            if body is None:
                return None
            content = body.get("content")
            if not isinstance(content, str):
                return self._send(400, {"error": "content_must_be_a_string"})
            fault = self.server.state.take_fault("workspace", "create")
            if not self._before(fault):
                return None
            target = self._confined("/".join(parts[2:]))
            if target is None:
                return self._send(400, {"error": "path_outside_workspace"})
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
            with self.server.state.lock:
                self.server.state.writes["/".join(parts[2:])] += 1
            result = {"path": "/".join(parts[2:]), "sha256": _sha256(content)}
            return self._after(fault, 200, result, {})
        return self._send(404, {"error": "not_found"})

    def do_DELETE(self) -> None:
        _path, parts, _query = self._route()
        if parts == ["_faults"]:
            with self.server.state.lock:
                self.server.state.faults.clear()
            return self._send(200, {"cleared": True})
        return self._send(404, {"error": "not_found"})

    # --- helpers ----------------------------------------------------------------------------
    def _cancel(self, service: str, object_id: str) -> None:
        state = self.server.state
        state.requests[f"{service}:cancel"] += 1
        fault = state.take_fault(service, "cancel")
        if not self._before(fault):
            return None
        key = self.headers.get("Idempotency-Key") or None
        if key is not None and not (0 < len(key) <= 1024):
            return self._send(400, {"error": "invalid_idempotency_key"})
        status, body = state.cancel(service, object_id, key)
        if status >= 400:
            return self._send(status, body)
        headers = {} if status == 201 else {"Idempotent-Replayed": "true"}
        return self._after(fault, status, body, headers)

    def _arm_fault(self, body: dict[str, Any]) -> None:
        mode = body.get("mode")
        if mode not in FAULT_MODES:
            return self._send(400, {"error": f"mode must be one of {', '.join(FAULT_MODES)}"})
        try:
            fault = Fault(
                mode=mode,
                service=str(body.get("service", "*")),
                operation=str(body.get("operation", "create")),
                remaining=int(body.get("count", 1)),
                latency_ms=int(body.get("latency_ms", 0)),
                hang_seconds=float(body.get("hang_seconds", 5.0)),
            )
        except (TypeError, ValueError):
            return self._send(400, {"error": "count, latency_ms and hang_seconds are numbers"})
        if fault.remaining < 1 or fault.latency_ms < 0 or not 0 <= fault.hang_seconds <= 120:
            return self._send(400, {"error": "fault parameters out of range"})
        with self.server.state.lock:
            self.server.state.faults.append(fault)
        return self._send(201, {"armed": fault.__dict__})

    def _confined(self, relative: str) -> Path | None:
        root = self.server.workspace
        target = (root / relative).resolve()
        return target if target.is_relative_to(root) and target != root else None

    def _read_file(self, relative: str) -> None:
        target = self._confined(relative)
        if target is None:
            return self._send(400, {"error": "path_outside_workspace"})
        if not target.is_file():
            return self._send(404, {"error": "not_found"})
        content = target.read_text(encoding="utf-8")
        return self._send(200, {"path": relative, "content": content, "sha256": _sha256(content)})


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def serve(host: str, port: int, workspace: Path) -> SandboxServer:
    """Create a server bound to (host, port); call ``serve_forever`` on it."""
    return SandboxServer((host, port), workspace)
