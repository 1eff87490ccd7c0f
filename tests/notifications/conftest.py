"""Real receivers for what the ledger sends: an HTTP server for webhooks and an SMTP server
(aiosmtpd) for e-mail, both started by the test on loopback."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from tests.reconcile.conftest import broker  # noqa: F401 - a private Redis for worker tests
from tests.sandbox_fixtures import SHUTDOWN_POLL


@dataclass
class WebhookReceiver:
    """Records every POST (path, JSON body); answers ``fail_next`` of them with a 500."""

    url: str = ""
    received: list[tuple[str, Any]] = field(default_factory=list)
    fail_next: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def posts(self, path: str) -> list[Any]:
        with self.lock:
            return [body for p, body in self.received if p == path]


@pytest.fixture
def webhook_receiver() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with receiver.lock:
                failing = receiver.fail_next > 0
                receiver.fail_next -= failing
                if not failing:
                    receiver.received.append((self.path, body))
            self.send_response(500 if failing else 204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL,), daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class SmtpReceiver:
    host: str
    port: int
    messages: list[Message]


@pytest.fixture
def smtp_receiver() -> Iterator[SmtpReceiver]:
    messages: list[Message] = []

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            messages.append(message_from_bytes(envelope.content))
            return "250 OK"

    with socket.socket() as probe:  # a free port: the controller checks it is up by connecting
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield SmtpReceiver("127.0.0.1", port, messages)
    finally:
        controller.stop()
