"""Containers and infrastructure: ``docker``, ``podman`` and ``kubectl`` replay their reading
subcommands, ``terraform`` those that change no infrastructure; removing or destroying is
destructive.
"""

from __future__ import annotations

from django.utils.translation import gettext_noop

from ledger.classification import Classification
from ledger.classification.shell.argv import ArgvClassifier
from ledger.classification.shell.programs import (
    CONDITIONAL,
    IDEMPOTENT,
    NON_IDEMPOTENT,
    ONLY_READS,
    result,
)
from ledger.stored_text import StoredText

_CHANGES_CONTAINERS = StoredText(gettext_noop("changes containers or a cluster."))
_NO_INFRASTRUCTURE_CHANGE = StoredText(
    gettext_noop("`terraform %(sub)s` does not change infrastructure.")
)
_CHANGES_INFRASTRUCTURE = StoredText(gettext_noop("changes infrastructure."))


def _container(program: str, args: list[str], text: str, depth: int) -> Classification:
    read = {
        "docker": {"ps", "images", "inspect", "logs", "version", "info", "stats", "top"},
        "podman": {"ps", "images", "inspect", "logs", "version", "info", "stats", "top"},
        "kubectl": {
            "get",
            "describe",
            "logs",
            "version",
            "explain",
            "top",
            "api-resources",
            "cluster-info",
            "diff",
        },
    }[program]
    sub = args[0] if args else ""
    if sub in read:
        return result(IDEMPOTENT, text, ONLY_READS(program=program, sub=sub), f"{program}.{sub}")
    destructive = sub in {"rm", "rmi", "delete", "prune", "system", "volume", "kill", "drain"}
    return result(
        NON_IDEMPOTENT,
        text,
        _CHANGES_CONTAINERS(),
        f"{program}.{sub}",
        destructive=destructive,
    )


def _terraform(program: str, args: list[str], text: str, depth: int) -> Classification:
    sub = args[0] if args else ""
    if sub in {"plan", "validate", "show", "output", "version", "providers", "graph", "fmt"}:
        return result(
            CONDITIONAL if sub == "fmt" else IDEMPOTENT,
            text,
            _NO_INFRASTRUCTURE_CHANGE(sub=sub),
            f"terraform.{sub}",
        )
    return result(
        NON_IDEMPOTENT,
        text,
        _CHANGES_INFRASTRUCTURE(),
        f"terraform.{sub}",
        destructive=sub in {"destroy", "apply", "import", "state", "taint"},
    )


PROGRAMS: dict[str, ArgvClassifier] = {
    "docker": _container,
    "podman": _container,
    "kubectl": _container,
    "terraform": _terraform,
}
