"""Adapters for agent frameworks; each needs its extra (``langgraph``, ``openai-agents``,
``pydantic-ai``). In each, the framework's tool-call id is the step id, its thread or run is
the ledger run, the ledger's approval becomes the framework's own interruption, and a cancel is
reported uncertain before it goes on."""
