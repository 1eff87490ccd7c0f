"""The exceptions of the client: what the ledger refused, and what a tool reports."""

from __future__ import annotations

from typing import Any


class LedgerRequestError(Exception):
    """The ledger refused the request itself (bad input, unknown run or tool, auth)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"{status} {problem.get('code')}: {problem.get('detail')}")
        self.status = status
        self.problem = problem


class LedgerUnavailableError(Exception):
    """The ledger could not be reached within the client's time budget."""


class ToolError(Exception):
    """Raise from a tool to report a definite failure.

    ``retryable=True`` says the call failed *without* side effect (it may be retried under
    the same key); an error code such as ``PERMISSION_DENIED`` is final whatever you say.
    """

    def __init__(self, code: str, message: str = "", *, retryable: bool = False) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.retryable = retryable


class InvalidToolInput(ToolError):
    """Raised before the tool's side effect started (argument validation, an adapter's own
    checks): the call is reported ``failed`` with no side effect, never uncertain."""

    def __init__(self, message: str) -> None:
        super().__init__("INVALID_TOOL_INPUT", message, retryable=True)
