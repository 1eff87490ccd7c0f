"""``seed_demo`` tells the workers how to reconcile the demo's calls: its side-effecting tools
are looked up in the sandbox, and its file writes are checked in the sandbox's workspace."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from console.management.commands.seed_demo import DEMO_DOWNSTREAMS, demo_workspace
from reconcile.models import DownstreamAdapter, WorkspaceRoot

pytestmark = pytest.mark.django_db


def test_the_demo_tools_are_looked_up_in_the_sandbox() -> None:
    with override_settings(DEBUG=True):
        call_command("seed_demo", sandbox_url="http://127.0.0.1:9999/")
    adapters = {
        a.tool.name: a.url_template
        for a in DownstreamAdapter.objects.select_related("tool").filter(tenant__slug="demo")
    }
    assert adapters == {
        tool: f"http://127.0.0.1:9999/{service}/objects/by-key/{{key}}"
        for tool, service in DEMO_DOWNSTREAMS.items()
    }
    workspace = WorkspaceRoot.objects.get(tenant__slug="demo", name="demo")
    assert workspace.path == demo_workspace() and workspace.path.startswith("/")


def test_seeding_again_follows_the_sandbox_url_and_adds_nothing() -> None:
    with override_settings(DEBUG=True):
        call_command("seed_demo")
        call_command("seed_demo", sandbox_url="http://127.0.0.1:8100")
    assert DownstreamAdapter.objects.count() == len(DEMO_DOWNSTREAMS)
    assert WorkspaceRoot.objects.count() == 1
    urls = set(DownstreamAdapter.objects.values_list("url_template", flat=True))
    assert all(url.startswith("http://127.0.0.1:8100/") for url in urls)


def test_a_sandbox_url_that_is_not_http_is_refused_and_changes_nothing() -> None:
    with override_settings(DEBUG=True), pytest.raises(CommandError, match="http"):
        call_command("seed_demo", sandbox_url="file:///etc/passwd")
    assert not DownstreamAdapter.objects.exists()
