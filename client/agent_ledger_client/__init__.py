"""Python client for Agent Ledger. Importable without Django; depends only on httpx."""

from agent_ledger_client.aio import AsyncLedgerClient, AsyncRun
from agent_ledger_client.client import LedgerClient, Run
from agent_ledger_client.errors import (
    InvalidToolInput,
    LedgerRequestError,
    LedgerUnavailableError,
    ToolError,
)
from agent_ledger_client.mirroring import Mirror
from agent_ledger_client.protocol import CallContext, LedgerProtocol

__version__ = "0.2.0"

__all__ = [
    "AsyncLedgerClient",
    "AsyncRun",
    "CallContext",
    "InvalidToolInput",
    "LedgerClient",
    "LedgerProtocol",
    "LedgerRequestError",
    "LedgerUnavailableError",
    "Mirror",
    "Run",
    "ToolError",
    "__version__",
]
