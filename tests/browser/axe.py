"""axe-core, the accessibility engine of Lighthouse and most browser audits, run on a page the
browser tests have open: the WCAG 2.1 A and AA rules and axe's best practices.

The package comes from the npm registry at a pinned version, installed once per checkout under
var/ (a lock keeps parallel test workers from installing it twice)."""

from __future__ import annotations

import fcntl
import subprocess
from functools import cache
from pathlib import Path

from playwright.sync_api import Page

ROOT = Path(__file__).resolve().parents[2]
VERSION = "4.14.1"
PREFIX = ROOT / "var" / f"npm-axe-{VERSION}"
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]


@cache
def source() -> str:
    """axe.min.js of the pinned version, installed with npm on first use."""
    script = PREFIX / "node_modules" / "axe-core" / "axe.min.js"
    PREFIX.mkdir(parents=True, exist_ok=True)
    with open(PREFIX / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not script.exists():
            subprocess.run(
                [
                    "npm",
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--prefix",
                    str(PREFIX),
                    f"axe-core@{VERSION}",
                ],
                check=True,
                capture_output=True,
                timeout=300,
            )
    return script.read_text()


def violations(page: Page) -> list[str]:
    """Each rule the page breaks, with the elements that break it: ``[]`` is a clean page.

    The script is evaluated through the DevTools protocol, which the console's
    Content-Security-Policy (no inline or foreign scripts) does not apply to."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(source())
    found = page.evaluate(
        "async (tags) => (await axe.run(document, {runOnly: {type: 'tag', values: tags},"
        " resultTypes: ['violations']}))"
        ".violations.map(v => `${v.id} (${v.impact}): ` +"
        " v.nodes.map(n => n.target.join(' ')).slice(0, 5).join(', '))",
        TAGS,
    )
    return list(found)
