"""Webhooks, compensations and look-ups reach only allowed, public hosts (ledger/outbound.py):
request forgery towards loopback, private or link-local addresses is refused at registration
and when sent, redirects are not followed, no proxy is taken from the environment and no
cookie is kept."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer

import httpx
import pytest

from ledger import outbound
from ledger.combinations import thresholds
from ledger.errors import InvalidInput
from ledger.models import Threshold
from tests.sandbox_fixtures import SHUTDOWN_POLL, arm

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
    thread = threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL,), daemon=True)
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
    threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL,), daemon=True).start()
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


@pytest.mark.parametrize(
    ("error", "failure"),
    [
        (outbound.OutboundRefused("billing resolves to 10.0.3.7"), outbound.Failure.REFUSED),
        (httpx.ConnectError("connection refused"), outbound.Failure.NOT_SENT),
        (httpx.ConnectTimeout("no connection in time"), outbound.Failure.NOT_SENT),
        (httpx.PoolTimeout("no connection free in the pool"), outbound.Failure.NOT_SENT),
        (httpx.UnsupportedProtocol("ftp://"), outbound.Failure.NOT_SENT),
        (httpx.ReadTimeout("no answer in time"), outbound.Failure.TIMED_OUT),
        (httpx.WriteTimeout("the body did not go out in time"), outbound.Failure.TIMED_OUT),
        (httpx.ReadError("connection reset by peer"), outbound.Failure.LOST),
        (httpx.WriteError("broken pipe"), outbound.Failure.LOST),
        (httpx.RemoteProtocolError("peer closed the connection"), outbound.Failure.LOST),
        (httpx.LocalProtocolError("cannot send"), outbound.Failure.LOST),
        (httpx.DecodingError("bad gzip"), outbound.Failure.LOST),
        (RuntimeError("anything else"), outbound.Failure.LOST),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_only_a_failure_before_sending_is_not_sent(
    error: Exception, failure: outbound.Failure
) -> None:
    assert outbound.failure_of(error) is failure


def test_only_a_request_that_went_out_may_have_arrived() -> None:
    arrived = {failure for failure in outbound.Failure if failure.may_have_arrived}
    assert arrived == {outbound.Failure.TIMED_OUT, outbound.Failure.LOST}


def _failure_posting(url: str, timeout: float = 5) -> outbound.Failure:
    with pytest.raises(Exception) as raised:
        outbound.post_json(url, {"reference": "r-1"}, timeout=timeout)
    return outbound.failure_of(raised.value)


def test_a_connection_refused_is_not_sent(settings) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: the connection is refused
        assert _failure_posting(f"http://127.0.0.1:{port}/orders/objects") is (
            outbound.Failure.NOT_SENT
        )


@pytest.mark.parametrize(
    ("fault", "failure"),
    [
        ({"mode": "timeout_after_commit", "hang_seconds": 2}, outbound.Failure.TIMED_OUT),
        ({"mode": "reset_after_commit"}, outbound.Failure.LOST),
        ({"mode": "truncated_after_commit"}, outbound.Failure.LOST),
    ],
    ids=["read-timeout", "reset-after-send", "truncated-body"],
)
def test_a_failure_after_the_downstream_acted_may_have_arrived(
    settings, sandbox, fault: dict[str, object], failure: outbound.Failure
) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    arm(sandbox, service="orders", **fault)
    found = _failure_posting(f"{sandbox.url}/orders/objects", timeout=0.5)
    assert found is failure and found.may_have_arrived
    stats = httpx.get(f"{sandbox.url}/orders/stats", timeout=5).json()
    assert stats["per_reference"] == {"r-1": 1}  # it did arrive, and was acted on
