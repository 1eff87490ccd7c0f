"""Observations the model reads, and what is stored of inputs and evidence."""

from __future__ import annotations

import pytest

from ledger.calls.observations import CallContext, refusal, success
from ledger.domain import DataClassification, Idempotency, ObservationCode, ReplayPolicy
from ledger.redaction import redact, redact_for_storage

CONTEXT = CallContext(
    "create_issue",
    Idempotency.NON_IDEMPOTENT,
    ReplayPolicy.NEVER,
    "agent:acme:u1:run-1:create_issue:bug-7",
    "call-1",
)


def test_uncertain_observation_matches_the_seed_shape() -> None:
    observation = refusal(ObservationCode.SIDE_EFFECT_UNCERTAIN, CONTEXT, next_action="lookup")
    assert observation["ok"] is False
    assert observation["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert "do not retry" in observation["content"]
    assert observation["metadata"] == {
        "retryable": False,
        "idempotency": "non_idempotent",
        "replay_policy": "never",
        "idempotency_key": CONTEXT.idempotency_key,
        "call_id": "call-1",
        "next_action": "lookup",
    }


def test_rejection_carries_the_reason_and_does_not_read_as_success() -> None:
    observation = refusal(
        ObservationCode.APPROVAL_REJECTED, CONTEXT, next_action="stop", detail="wrong customer"
    )
    assert observation["ok"] is False
    assert "NOT executed" in observation["content"] and "wrong customer" in observation["content"]


def test_recorded_result_is_ok_and_marked_replayed() -> None:
    observation = success({"id": 7}, CONTEXT, replayed=True)
    assert observation["ok"] is True and observation["metadata"]["replayed"] is True
    assert observation["content"] == {"id": 7}


def test_secrets_and_personal_data_are_redacted() -> None:
    value = {
        "password": "hunter2",
        "api_key": "abc",
        "note": "mail bob@example.com card 4242 4242 4242 4242 token sk_live_abcdefgh12345",
        "order": "12345",
        "items": [{"Authorization": "Bearer xyz"}],
    }
    redacted = redact(value)
    assert redacted["password"] == "[REDACTED]" and redacted["api_key"] == "[REDACTED]"
    assert "bob@example.com" not in redacted["note"]
    assert "4242 4242 4242 4242" not in redacted["note"]
    assert "sk_live" not in redacted["note"]
    assert redacted["order"] == "12345"  # not a card: too short
    assert redacted["items"][0]["Authorization"] == "[REDACTED]"


@pytest.mark.parametrize("name", ["fencing_token", "fencingToken", "FENCING_TOKEN"])
def test_a_fencing_token_is_not_a_secret(name: str) -> None:
    """A record's fencing token is a counter that orders its executions: shown, not hidden."""
    assert redact({name: 7, "nested": {name: 8}}) == {name: 7, "nested": {name: 8}}


@pytest.mark.parametrize(
    "name",
    [
        "token",
        "auth_token",
        "access_token",
        "refresh_token",
        "fencing_token_secret",
        "api_token",
        "password",
        "api_key",
        "client_secret",
        "Authorization",
    ],
)
def test_tokens_of_auth_passwords_and_keys_stay_secret(name: str) -> None:
    assert redact({name: "s3cr3t", "fencing_token": 3}) == {
        name: "[REDACTED]",
        "fencing_token": 3,
    }


def test_numbers_failing_luhn_are_kept() -> None:
    assert redact("id 1234 5678 9012 3456") == "id 1234 5678 9012 3456"


def test_restricted_data_keeps_only_a_hash() -> None:
    stored = redact_for_storage({"diagnosis": "x"}, DataClassification.RESTRICTED)
    assert set(stored) == {"redacted", "sha256"} and "x" not in str(stored)


def test_confidential_text_is_truncated() -> None:
    stored = redact_for_storage({"body": "a" * 2000}, DataClassification.CONFIDENTIAL)
    assert len(stored["body"]) < 600
