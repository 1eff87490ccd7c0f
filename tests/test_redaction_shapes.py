"""Secrets recognised by their shape wherever they are in a text, and by their name wherever
they are in a JSON value (``ledger.redaction``); what only looks like one is kept."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.redaction import redact, redact_text, secret_name

SECRET = "hunter2Zq8Kd93LmX"
PEM_BODY = f"MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n{SECRET}\nAoGBAMc3yc3Ov5nR"


@pytest.mark.parametrize(
    "text",
    [
        f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----",
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----",
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}\n-----END OPENSSH PRIVATE KEY-----",
        f"-----BEGIN ENCRYPTED PRIVATE KEY-----\n{PEM_BODY}\n-----END ENCRYPTED PRIVATE KEY-----",
        f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n{PEM_BODY}\n-----END PGP PRIVATE KEY BLOCK-----",
        f"-----BEGIN EC PRIVATE KEY-----\\n{SECRET}\\n-----END EC PRIVATE KEY-----",
        f"key cut short: -----BEGIN PRIVATE KEY-----\n{PEM_BODY}",
        f"https://deploy:{SECRET}@git.example.com/org/repo.git",
        f"postgres://app:{SECRET}@10.0.0.5:5432/ledger",
        f"https://x-access-token:{SECRET}@github.com/org/repo",
        f"redis://:{SECRET}@cache:6379/0",
        f"https://user:p@ss{SECRET}@host/",
        f"GET /api/v1/records?key={SECRET} HTTP/1.1",
        f"https://api.example.com/v1/orders?page=2&token={SECRET}&sort=asc",
        f"https://s3.example.com/o?X-Amz-Signature={SECRET}",
        f"https://blob.example.com/c?sv=2021&sig={SECRET}",
        f"callback?access_token={SECRET}#state",
        f"apikey={SECRET}",
        f"api_key = {SECRET}",
        f"client_secret={SECRET}; path=/",
        f"password: {SECRET}",
        f"Authorization: Basic {SECRET}",
        f"X-Api-Key: {SECRET}",
        f'{{"user": "bob", "password": "{SECRET}"}}',
        f'{{"refresh_token":"{SECRET}","scope":"read"}}',
        f"{{'private_key': '{SECRET}'}}",
        f'settings: {{"auth": {{"pwd": "{SECRET}"}}}}',
        f"+DB_PASSWORD={SECRET}\n",
    ],
)
def test_a_secret_in_a_text_is_redacted_by_its_shape(text: str) -> None:
    redacted = redact_text(text)
    assert SECRET not in redacted and "[REDACTED" in redacted, redacted


@pytest.mark.parametrize(
    "text",
    [
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----",
        "https://git.example.com/org/repo.git",
        "https://host:8443/path?page=2",
        "agent:acme:u1:run-1:refresh_token:cart-42",
        "monkey=banana and author=ann",
        "fencing_token=3",
        "meeting at 12:30: ok",
        '{"key": "cart-42", "note": "as agreed"}',
    ],
)
def test_what_only_looks_like_a_secret_is_kept(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "name",
    [
        "pwd",
        "passwd",
        "password",
        "secret",
        "client_secret",
        "api_key",
        "apikey",
        "x-api-key",
        "access_token",
        "refresh_token",
        "authorization",
        "private_key",
        "privateKey",
        "signature",
        "jwt",
    ],
)
def test_a_field_named_like_a_secret_is_redacted_at_any_depth(name: str) -> None:
    value = {"order": {"lines": [{name: SECRET, "sku": "a-1"}]}}
    assert redact(value) == {"order": {"lines": [{name: "[REDACTED]", "sku": "a-1"}]}}


@pytest.mark.parametrize("field", ["name", "key"])
def test_a_value_named_by_a_sibling_field_is_redacted(field: str) -> None:
    """Headers and environment variables given as a list of name and value."""
    value = [{field: "Authorization", "value": SECRET}, {field: "Accept", "value": "json"}]
    assert redact(value) == [
        {field: "Authorization", "value": "[REDACTED]"},
        {field: "Accept", "value": "json"},
    ]


@pytest.mark.parametrize(
    ("name", "parameter", "secret"),
    [
        ("key", True, True),
        ("idempotency_key", True, True),
        ("apiKey", True, True),
        ("key", False, False),
        ("monkey", True, False),
        ("page", True, False),
        ("fencing_token", True, False),
    ],
)
def test_a_key_is_secret_as_a_parameter_and_not_as_a_field(
    name: str, parameter: bool, secret: bool
) -> None:
    assert secret_name(name, parameter=parameter) is secret


_WORDS = st.text(alphabet=string.ascii_letters + string.digits + " .,;:()-/\n\t", max_size=30)
_SECRETS = st.text(alphabet=string.ascii_letters + string.digits, min_size=12, max_size=40)


@st.composite
def _planted(draw: st.DrawFn) -> tuple[str, str]:
    secret = "Q" + draw(_SECRETS)
    shape = draw(
        st.sampled_from(
            [
                f"-----BEGIN PRIVATE KEY-----\n{secret}\n-----END PRIVATE KEY-----",
                f"https://u:{secret}@example.com/x",
                f"https://example.com/x?a=1&access_token={secret}",
                f"token={secret}",
                f"password: {secret}",
                f'"client_secret": "{secret}"',
                f"Authorization: Basic {secret}",
            ]
        )
    )
    return draw(_WORDS) + draw(st.sampled_from([" ", "\n", "(", ", "])) + shape, secret


@given(planted=_planted(), after=_WORDS)
def test_a_planted_secret_never_survives_in_any_surroundings(planted, after) -> None:
    text, secret = planted
    assert secret not in redact_text(text + " " + after)
