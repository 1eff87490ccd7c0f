"""Webhooks, compensations and look-ups reach only allowed, public hosts (ledger/outbound.py):
request forgery towards loopback, private or link-local addresses is refused at registration
and when sent, redirects are not followed, no proxy is taken from the environment and no
cookie is kept."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer

import pytest

from ledger import outbound
from ledger.errors import InvalidInput
from ledger.models import Threshold
from ledger.services import thresholds

pytestmark = pytest.mark.django_db

FORGERIES = [
    "http://127.0.0.1:8000/admin/",
    "http://localhost/",
    "http://[::1]/",
    "http://10.1.2.3/",
    "http://192.168.0.1/",
    "http://172.16.0.1/",
    "http://169.254.169.254/latest/meta-data/",  # the cloud metadata service
    "http://0.0.0.0/",
    "http://[fe80::1]/",
]


@pytest.mark.parametrize("url", FORGERIES)
def test_a_webhook_to_a_non_public_address_is_refused_at_registration(tenant, url: str) -> None:
    with pytest.raises(InvalidInput, match="webhook_url"):
        thresholds.add_threshold(
            tenant=tenant,
            actor="m",
            source="api",
            metric="duplicate_side_effects",
            above=0,
            webhook_url=url,
        )
    assert not Threshold.objects.exists()


@pytest.mark.parametrize("url", FORGERIES)
def test_delivery_checks_again(url: str) -> None:
    with pytest.raises(outbound.OutboundRefused):
        outbound.post_json(url, {"x": 1})


def test_only_listed_hosts_when_a_list_is_set(settings) -> None:
    settings.LEDGER_OUTBOUND_ALLOWED_HOSTS = ["hooks.example.com"]
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # the list applies even then
    outbound.check_url("https://hooks.example.com/x")
    outbound.check_url("https://eu.hooks.example.com/x")
    for url in ("https://example.com/x", "https://hooks.example.com.evil.test/x"):
        with pytest.raises(outbound.OutboundRefused, match="LEDGER_OUTBOUND_ALLOWED_HOSTS"):
            outbound.check_url(url)


def test_private_networks_only_when_allowed(settings, sandbox) -> None:
    with pytest.raises(outbound.OutboundRefused):
        outbound.check_url(sandbox.url)
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    outbound.check_url(sandbox.url)


@pytest.fixture
def hook() -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """A local hook answering every request with a redirect; its port and the (path, Host
    header) of each request it got."""
    hits: list[tuple[str, str]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            hits.append((self.path, self.headers["Host"]))
            self.send_response(302)
            self.send_header("Location", "/internal")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], hits
    server.shutdown()


def test_redirects_are_not_followed(settings, hook) -> None:
    """A hook that answers with a redirect (to an internal address, say) gets no second
    request."""
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    port, hits = hook
    response = outbound.post_json(f"http://127.0.0.1:{port}/hook", {"x": 1})
    assert response.status_code == 302
    assert hits == [("/hook", f"127.0.0.1:{port}")]


def test_a_delivery_goes_to_the_address_it_checked_with_the_urls_host(settings, hook) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    port, hits = hook
    outbound.post_json(f"http://localhost:{port}/hook", {"x": 1})
    assert hits == [("/hook", f"localhost:{port}")]


def test_a_name_that_rebinds_to_a_private_address_after_the_check_is_not_reached(
    hook, monkeypatch
) -> None:
    """DNS rebinding: the name answers a public address to the request's check, then loopback
    when the connection is opened: the connection's own check refuses it, and the local hook
    is never reached."""
    port, hits = hook
    answers = iter(["192.0.43.10", "127.0.0.1", "127.0.0.1", "127.0.0.1"])
    real = socket.getaddrinfo

    def rebinding(host: str, *args: object, **kwargs: object) -> list:
        if host == "rebind.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    with pytest.raises(outbound.OutboundRefused, match=r"resolves to 127\.0\.0\.1"):
        outbound.post_json(f"http://rebind.example:{port}/hook", {"x": 1}, timeout=1)
    assert hits == []


@pytest.mark.parametrize(
    "url", ["http://q\u00b3:\u00f3\u00fd[x", "http://example.com:99999/", "http://[::1/"]
)
def test_a_url_python_cannot_split_is_refused_not_an_error(tenant, url: str) -> None:
    with pytest.raises(outbound.OutboundRefused):
        outbound.check_url(url)
    with pytest.raises(InvalidInput, match="webhook_url"):
        thresholds.add_threshold(
            tenant=tenant,
            actor="t",
            source="api",
            metric="uncertain_results",
            above=1,
            webhook_url=url,
        )
    assert not Threshold.objects.exists()


def test_requests_keep_no_cookies_between_them(settings) -> None:
    """The pooled client is shared by every tenant's URLs: a cookie one downstream set is never
    sent with another request."""
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
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
        outbound.get(f"{base}/tenant-a/lookup/k1", timeout=5)
        outbound.get(f"{base}/tenant-b/lookup/k2", timeout=5)
    finally:
        server.shutdown()
    assert seen == [None, None]


def test_a_proxy_in_the_environment_is_not_used(settings, hook, monkeypatch) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    port, hits = hook
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setattr(outbound, "_clients", {})  # a client built with this environment
    assert outbound.get(f"http://127.0.0.1:{port}/x", timeout=5).status_code == 302
    assert hits == [("/x", f"127.0.0.1:{port}")]
