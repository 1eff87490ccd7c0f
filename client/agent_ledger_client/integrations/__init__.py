"""Adapters for agent frameworks; each needs its extra (``langgraph``, ``openai-agents``,
``pydantic-ai``). In each, the framework's tool-call id is the step id, its thread or run is
the ledger run, and a call re-planned under a new tool-call id is the same action. A timeout,
a lost answer or a cancel is reported uncertain whatever the framework's error handling. The
ledger's approval becomes the framework's own pause, carrying the ledger's approval id; the
framework's own approval gate is kept, and a decision made in the framework's UI reaches the
ledger through an optional approver client (``approvals``)."""
