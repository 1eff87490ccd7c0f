"""The downstream adapters' HTTP client: one pooled client per process, which keeps no
cookies, so a look-up never carries what one tenant's downstream set to another's."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from reconcile.adapters import http_client


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
