"""Every console page of the demo's ledger, read in Chinese, says in Chinese what the ledger
stored in English: classification reasons, escalation reasons, audit details and run endings
are translated when they are shown, their names and numbers filled in."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client, override_settings

from console.models import Preferences
from ledger import combinations
from ledger.models import IdempotencyRecord, Tenant, VersionCombination, WorkspaceRoot
from reconcile import services as reconcile_services
from reconcile.models import DownstreamAdapter

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# English the ledger stores and the console shows; each is what one stored text starts with.
ENGLISH = [
    "has no downstream adapter",
    "is not registered on the workers",
    "The name says it",
    "Reads state without changing it",
    "Creates an external side effect",
    "Overwrites state",
    "wrong user name or password",
    "(from ",
    "version combination",
    "combination rolled back",
    "rollback of",
    "halted:",
    "compensate ",
    "No idempotency was declared",
    "The write did not land",
    "now has hash",
    "look-up URL refused",
    "declares no compensation",
    "A shell tool is classified per call",
]
# Pages that change something or answer with a file, not a page to read.
NOT_PAGES = re.compile(
    r"/(logout|language|tenant|bulk|decide|action|override|import)\b|\.csv|/api/"
)


class _Text(HTMLParser):
    """The text a reader sees (no scripts or styles) and the console's links. A ``pre`` holds
    data as the ledger stored it (an audit event's before and after), not a sentence."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.links: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style", "pre"):
            self._hidden += 1
        href = dict(attrs).get("href") or ""
        if tag == "a" and href.startswith("/") and not href.startswith("//"):
            self.links.append(href.split("#")[0])

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "pre"):
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.text.append(data)


def _crawl(client: Client, start: list[str], limit: int = 400) -> Iterator[tuple[str, str]]:
    """Each console page reachable from ``start`` (path, visible text), each path once."""
    seen: set[str] = set()
    queue = list(start)
    while queue and len(seen) < limit:
        path = queue.pop(0)
        if path in seen or NOT_PAGES.search(path):
            continue
        seen.add(path)
        response = client.get(path, secure=True)
        if response.status_code != 200 or "text/html" not in response["Content-Type"]:
            continue
        parsed = _Text()
        parsed.feed(response.content.decode())
        yield path, " ".join(parsed.text)
        queue.extend(link for link in parsed.links if link not in seen)


def _demo_ledger() -> Tenant:
    """The demo's ledger, with what a day of operation adds: a failed and a good sign-in, a
    call no worker can look up, its look-up escalated, and the candidate rolled back."""
    with override_settings(DEBUG=True):
        call_command("seed_demo", stdout=StringIO())
        call_command("demo_agent", runs=1, stdout=StringIO())
    tenant = Tenant.objects.get(slug="demo")
    # No worker can look up the orders or check the files: both escalate with a reason.
    DownstreamAdapter.objects.filter(tool__name="create_order").delete()
    WorkspaceRoot.objects.filter(tenant=tenant).delete()
    for record in IdempotencyRecord.objects.filter(tenant=tenant, state="unknown"):
        reconcile_services.reconcile_record(record.pk, worker="test-worker")
    candidate = VersionCombination.objects.get(tenant=tenant, label="candidate")
    combinations.rollback(
        tenant=tenant,
        combination_id=candidate.pk,
        actor="manager",
        source="console",
        reason="bad prompt",
    )
    return tenant


@pytest.mark.scale
def test_every_page_of_the_demo_reads_in_chinese() -> None:
    _demo_ledger()
    user = get_user_model().objects.get(username="admin")
    Preferences.objects.update_or_create(user=user, defaults={"language": "zh-hans"})
    Client().post("/login/", {"username": "admin", "password": "wrong"}, secure=True)
    client = Client()
    client.force_login(user)
    start = ["/", "/approvals/", "/unknown/", "/ledger/", "/ledger/runs/", "/combinations/"]
    start += ["/audit/", "/tools/", "/metrics/", "/on-call/", "/rollouts/", "/shadow/"]
    english = {
        (path, sentence)
        for path, text in _crawl(client, start)
        for sentence in ENGLISH
        if sentence in text
    }
    assert sorted(english) == [], sorted(english)
