"""What the list pages compute once instead of on every row says the same as the general way:
an object page's URL, a term in the user's language, the user's memberships."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse, set_script_prefix
from django.utils import translation

from console.navigation import OBJECT_PAGES
from console.templatetags.target_links import object_url
from console.templatetags.terms import TERMS, term
from tests.console.conftest import make_user, signed_in
from tests.factories import make_tenant


@pytest.mark.parametrize("page", OBJECT_PAGES)
@pytest.mark.parametrize("pk", [1, 42, 10**12])
def test_object_url_is_the_reversed_url(page: str, pk: int) -> None:
    assert object_url(page, pk) == reverse(f"console:{page}", kwargs={"pk": pk})


def test_object_url_follows_the_script_prefix() -> None:
    set_script_prefix("/ledger-console/")
    try:
        url = object_url("call", 7)
        assert url == reverse("console:call", kwargs={"pk": 7})
        assert url.startswith("/ledger-console/")
    finally:
        set_script_prefix("/")
    assert object_url("call", 7) == reverse("console:call", kwargs={"pk": 7})


def test_a_term_is_in_the_language_of_each_request() -> None:
    with translation.override("zh-hans"):
        chinese = term("pending")
        assert chinese == str(TERMS["pending"])
    with translation.override("en"):
        assert term("pending") == "pending"
    assert chinese != "pending"
    assert term("not_a_term") == "not a term"


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/", "/ledger/", "/ledger/runs/", "/unknown/", "/audit/"])
def test_a_page_reads_the_users_memberships_once(django_user_model, path: str) -> None:
    first, second = make_tenant("first"), make_tenant("second")
    user = make_user(django_user_model, "ana", first, "operator")
    user.memberships.create(tenant=second, role="approver")
    client = signed_in(user)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path, secure=True)
    # The first tenant by slug, with the operator's role there: every path here opens.
    assert response.status_code == 200
    reads = [q["sql"] for q in captured.captured_queries if '"ledger_membership"' in q["sql"]]
    assert len(reads) == 1, reads
    # The tenant switcher lists both tenants.
    assert b">First</option>" in response.content
    assert b">Second</option>" in response.content
