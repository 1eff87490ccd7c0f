"""Containers and infrastructure: ``docker``, ``podman`` and ``kubectl`` replay their reading
subcommands, ``terraform`` those that change no infrastructure; removing or destroying is
destructive.
"""

from __future__ import annotations

from ledger.classification import Classification
from ledger.classification.shell.argv import ArgvClassifier
from ledger.classification.shell.programs import (
    CONDITIONAL,
    IDEMPOTENT,
    NON_IDEMPOTENT,
    result,
)


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
        return result(IDEMPOTENT, text, f"`{program} {sub}` only reads.", f"{program}.{sub}")
    destructive = sub in {"rm", "rmi", "delete", "prune", "system", "volume", "kill", "drain"}
    return result(
        NON_IDEMPOTENT,
        text,
        "changes containers or a cluster.",
        f"{program}.{sub}",
        destructive=destructive,
    )


def _terraform(program: str, args: list[str], text: str, depth: int) -> Classification:
    sub = args[0] if args else ""
    if sub in {"plan", "validate", "show", "output", "version", "providers", "graph", "fmt"}:
        return result(
            CONDITIONAL if sub == "fmt" else IDEMPOTENT,
            text,
            f"`terraform {sub}` does not change infrastructure.",
            f"terraform.{sub}",
        )
    return result(
        NON_IDEMPOTENT,
        text,
        "changes infrastructure.",
        f"terraform.{sub}",
        destructive=sub in {"destroy", "apply", "import", "state", "taint"},
    )


PROGRAMS: dict[str, ArgvClassifier] = {
    "docker": _container,
    "podman": _container,
    "kubectl": _container,
    "terraform": _terraform,
}
