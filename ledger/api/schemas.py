"""Request and response shapes of API v1. Inputs forbid unknown fields."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from django.core.serializers.json import DjangoJSONEncoder
from ninja import Schema
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StrictBool,
    WithJsonSchema,
)

from ledger.classification import Classification
from ledger.domain import DataClassification, Decision, Idempotency, InputSource, KeyScope
from ledger.keys import KEY_FIELD_SYNTAX, MAX_COMPONENT_LENGTH, MAX_KEY_FIELDS
from ledger.services.registry import SERVER_NAME, TOOL_NAME

TOOL_NAME_PATTERN = TOOL_NAME.pattern
SERVER_NAME_PATTERN = SERVER_NAME.pattern


def _json_integer(value: Any) -> Any:
    """JSON Schema's integer: 3 and 3.0 are integers; "3" and true are not."""
    if isinstance(value, str | bool):
        raise ValueError("must be a JSON integer")
    return value


def _json_number(value: Any) -> Any:
    if isinstance(value, str | bool):
        raise ValueError("must be a JSON number")
    return value


PositiveInt = Annotated[int, Field(ge=1, le=2**62), BeforeValidator(_json_integer)]
JsonInt = Annotated[int, BeforeValidator(_json_integer)]
JsonNumber = Annotated[float, BeforeValidator(_json_number)]


def _as_api_json(value: datetime) -> str:
    """A time as every JSON answer of the API writes it, whichever serialiser writes the answer
    (django-ninja's encoder, or pydantic for the call answers): ISO 8601 with milliseconds,
    ``Z`` for UTC, as Django's JSON encoder writes it."""
    return str(DjangoJSONEncoder().default(value))


# Output times: one format across the API (the call answers are serialised by pydantic itself,
# which would otherwise write microseconds). Still a date-time in the OpenAPI document.
ApiDateTime = Annotated[
    datetime,
    PlainSerializer(_as_api_json, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
Identifier = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
Sha256 = Field(pattern=r"^[0-9a-f]{64}$")


class Strict(BaseModel):
    """Request bodies: plain pydantic (no lenient attribute access), unknown fields refused."""

    model_config = ConfigDict(extra="forbid")


class Problem(Schema):
    type: str
    title: str
    status: int
    code: str
    detail: str
    # A refused report (409): what the record holds now and what the model should be told.
    record_state: str | None = None
    observation: dict[str, Any] | None = None
    # Store trouble (503): why, e.g. ``lock_timeout`` or ``read_only``.
    reason: str | None = None


class ClassificationOut(Schema):
    idempotency: Idempotency
    replay_policy: str
    destructive: bool
    reason: str
    rule: str

    @classmethod
    def of(cls, classification: Classification) -> ClassificationOut:
        return cls(
            idempotency=classification.idempotency,
            replay_policy=classification.replay_policy.value,
            destructive=classification.destructive,
            reason=classification.reason,
            rule=classification.rule,
        )


KeyField = Annotated[str, Field(pattern=KEY_FIELD_SYNTAX, max_length=MAX_COMPONENT_LENGTH)]


class ToolIn(Strict):
    """A runtime's tool. ``idempotency`` is a hint: it may make the tool stricter than the
    ledger reads its name and description, never looser (a manager's override can)."""

    name: str = Field(pattern=TOOL_NAME_PATTERN, max_length=200)
    idempotency: Idempotency | None = None
    description: str = Field(default="", max_length=4000)
    output_schema: dict[str, Any] | None = None
    key_scope: KeyScope | None = None
    #: Argument paths (``cart.id``) the business object is derived from; a non-idempotent
    #: tool with key fields defaults to the ``business`` scope.
    key_fields: list[KeyField] | None = Field(default=None, max_length=MAX_KEY_FIELDS)


class ToolOut(Schema):
    name: str
    kind: str
    server: str | None
    description: str
    key_scope: str
    key_fields: list[str]
    output_schema: dict[str, Any] | None
    classification: ClassificationOut
    overridden: bool


class McpAnnotations(BaseModel):
    model_config = ConfigDict(extra="allow")
    readOnlyHint: StrictBool | None = None
    destructiveHint: StrictBool | None = None
    idempotentHint: StrictBool | None = None
    openWorldHint: StrictBool | None = None


class McpTool(BaseModel):
    """One tool of an MCP ``tools/list`` result; fields the ledger does not read are kept."""

    model_config = ConfigDict(extra="allow")
    # With the server's name (up to 100) and "/", a registry name stays within 200.
    name: str = Field(pattern=TOOL_NAME_PATTERN, max_length=99)
    description: str | None = Field(default=None, max_length=20_000)
    inputSchema: dict[str, Any] = Field(default_factory=dict)
    annotations: McpAnnotations | None = None


class McpToolsList(BaseModel):
    model_config = ConfigDict(extra="allow")
    tools: list[McpTool] = Field(max_length=500)


class McpImportIn(Strict):
    server: str = Field(pattern=SERVER_NAME_PATTERN, max_length=100)
    trust: Literal["trusted", "untrusted"]
    tools_list: McpToolsList = Field(description="An MCP tools/list result: {'tools': [...]}")
    key_fields: dict[str, list[KeyField]] | None = Field(
        default=None,
        max_length=500,
        description="Key fields by the server's tool name ({'create_issue': ['repo', "
        "'title']}): what identifies each tool's business action. A tool not named keeps the "
        "key fields it has.",
    )
    implementation: str | None = Field(
        default=None,
        max_length=200,
        description="The name the server gave itself in its initialize result "
        "(serverInfo.name): the reads of a reference server the ledger knows are reads "
        "whatever the server's trust. Left out, the server keeps the name it has.",
    )


class KeyFieldsIn(Strict):
    """What identifies a tool's business action: argument paths (``cart.id``); none keys a
    call by its arguments in its run (a read by its step)."""

    key_fields: list[KeyField] = Field(max_length=MAX_KEY_FIELDS)
    key_scope: KeyScope | None = None


class ClassifyIn(Strict):
    tool: str = Field(pattern=TOOL_NAME_PATTERN, max_length=200)
    input: dict[str, Any] = Field(default_factory=dict)


class RunIn(Strict):
    run_id: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f:]+$"
    )
    user_id: str = Identifier
    agent_id: str = Field(default="", max_length=200)
    combination_id: PositiveInt | None = None
    shadow: bool = Field(
        default=False,
        description="Start a shadow run mirroring ``mirrors_run_id``: its side-effecting calls "
        "are answered SHADOW_DRY_RUN and never execute.",
    )
    mirrors_run_id: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f:]+$"
    )


class MirrorOut(Schema):
    run_id: str = Field(description="The shadow run's id to start.")
    combination_id: int = Field(description="The combination in shadow to pin it to.")


class RunOut(Schema):
    run_id: str
    user_id: str
    agent_id: str
    status: str
    combination_id: int | None
    combination_label: str | None
    shadow_of: str | None = Field(description="The live run a shadow run mirrors.")
    mirror: MirrorOut | None = Field(
        description="For a live run whose id falls in the share of the combination in shadow: "
        "the shadow run the runtime starts to mirror it (``shadow``, ``mirrors_run_id`` and "
        "this ``combination_id``), running the same input through the candidate; null when "
        "the run is not mirrored."
    )
    termination_reason: str
    started_at: ApiDateTime
    finished_at: ApiDateTime | None


class RunFinishIn(Strict):
    termination_reason: str = Identifier


class WritePlanIn(Strict):
    workspace: str = Identifier
    path: str = Field(min_length=1, max_length=1024)
    before_hash: str = Sha256
    after_hash: str = Sha256
    diff: str = Field(default="", max_length=200_000)
    patch_ref: str = Field(default="", max_length=200)


class CallIn(Strict):
    run_id: str = Identifier
    step_id: str = Identifier
    tool: str = Field(pattern=TOOL_NAME_PATTERN, max_length=200)
    input: dict[str, Any] = Field(default_factory=dict)
    business_object_id: str | None = Field(default=None, min_length=1, max_length=200)
    input_source: InputSource = InputSource.MODEL
    data_classification: DataClassification = DataClassification.INTERNAL
    end_user_id: str = Field(default="", max_length=200)
    write_plan: WritePlanIn | None = None


class LeaseOut(Schema):
    fencing_token: int
    expires_at: ApiDateTime
    # The lease's length: a runtime heartbeats every third of it on its own clock, never by
    # comparing ``expires_at`` with its clock.
    seconds: int


class RecordOut(Schema):
    key: str
    tool: str
    state: str
    executions: int
    duplicate_hits: int
    result: Any | None
    error: dict[str, Any] | None
    created_at: ApiDateTime
    updated_at: ApiDateTime
    #: For a compensated action, ``{"role": "compensated_by", "key", "record_id", "state"}``
    #: (``state`` is ``compensated`` once it succeeded); for a compensation, ``{"role":
    #: "compensates", ...}`` naming the action it undoes; else null.
    compensation: dict[str, Any] | None = None


class CallOut(Schema):
    call_id: str
    run_id: str
    step_id: str
    tool: str
    status: str
    decision: Decision
    idempotency_key: str
    classification: ClassificationOut
    observation: dict[str, Any] | None
    lease: LeaseOut | None
    approval_id: int | None
    approval_state: str | None
    record_state: str | None
    notes: list[str]


# The most calls one batch may carry: more than a model hands a runtime in one turn.
MAX_BATCH_CALLS = 32


class CallBatchIn(Strict):
    """Tool calls a model asked for in one turn, each recorded and decided as if sent alone,
    in this order."""

    calls: list[CallIn] = Field(min_length=1, max_length=MAX_BATCH_CALLS)


class RefusalOut(Problem):
    """The problem document the call would have been answered with alone."""

    model_config = ConfigDict(extra="allow")


class CallBatchItemOut(Schema):
    """One call's answer: ``status`` is the HTTP status it would have had alone; ``call`` its
    answer (200, 409 ``wait``, 422 ``conflict``), else ``problem`` its refusal; ``retry_after``
    what the answer's ``Retry-After`` header would have said (a ``wait``, a 503)."""

    status: int
    call: CallOut | None = None
    problem: RefusalOut | None = None
    retry_after: int | None = None


class CallBatchOut(Schema):
    results: list[CallBatchItemOut]


class HeartbeatIn(Strict):
    fencing_token: PositiveInt


class HeartbeatOut(Schema):
    lease_expires_at: ApiDateTime
    lease_seconds: int


class ErrorIn(Strict):
    code: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:-]+$")
    message: str = Field(default="", max_length=4000)


class CompleteIn(Strict):
    fencing_token: PositiveInt
    outcome: Literal["succeeded", "failed", "uncertain"]
    result: Any = None
    error: ErrorIn | None = None
    retryable: StrictBool = Field(
        default=False, description="Failed without side effect; may retry."
    )
    evidence: dict[str, Any] | None = None


#: The input a replay or a start runs: the recorded action's own, or 422.
RunsInput = Field(
    description="The exact input the tool will run with: it must be the recorded action's "
    "(the same fingerprint), else 422 IDEMPOTENCY_KEY_CONFLICT and nothing runs.",
)


class StartIn(Strict):
    input: dict[str, Any] = RunsInput


class ReplayIn(Strict):
    input: dict[str, Any] = RunsInput
    current_hash: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="The file's sha256 now, for a conditional write's condition check.",
    )


class CompensationDeclarationIn(Strict):
    """How ``tool``'s action (or, with ``call_id``, one call's) is undone."""

    tool: str = Field(pattern=TOOL_NAME_PATTERN, max_length=200)
    compensating_tool: str = Field(pattern=TOOL_NAME_PATTERN, max_length=200)
    #: ``{argument: "input.<path>" | "result.<path>"}``, e.g. ``{"order_id": "result.id"}``.
    arguments: dict[str, str] = Field(min_length=1, max_length=20)
    call_id: str | None = Field(default=None, max_length=64)


class CompensationDeclarationOut(Schema):
    tool: str
    compensating_tool: str
    arguments: dict[str, str]
    call_id: str | None
    declared_by: str


class CompensationKeyIn(Strict):
    #: The idempotency key of the action to compensate.
    key: str = Field(min_length=1, max_length=1024)


class CompensationCallOut(Schema):
    """The exact call a compensation makes."""

    original_key: str
    tool: str
    arguments: dict[str, Any]
    idempotency_key: str
    url: str


class CompensationOut(Schema):
    call: CompensationCallOut
    #: The compensation record's state; ``compensated`` once it succeeded.
    state: str
    requested_by: str
    approval_id: int | None
    approval_state: str | None


class SagaStepOut(Schema):
    original_key: str
    #: ``planned`` (previewed, not requested), ``none`` (no compensation), the compensation
    #: record's state, or ``compensated``.
    state: str
    call: CompensationCallOut | None
    problem: str


class SagaOut(Schema):
    run_id: str
    #: Newest action first: the order the saga runs them in.
    steps: list[SagaStepOut]


class WritePlanOut(Schema):
    workspace: str
    path: str
    before_hash: str
    after_hash: str
    diff: str


class ApprovalOut(Schema):
    """An approval request: the exact action it is for, who asked, and where it stands."""

    id: int
    state: str
    #: Whether it can still be given (pending, not expired, its action waiting, nothing halted).
    open: bool
    #: Why a pending request can no longer be given; None while it can.
    void_reason: str | None
    call_id: str
    run_id: str
    tool: str
    idempotency_key: str
    #: The call's input as stored (redacted by its data classification).
    input: Any
    action_hash: str
    requested_by: str
    created_at: ApiDateTime
    expires_at: ApiDateTime
    decided_by: str | None
    decision_reason: str
    decided_at: ApiDateTime | None
    #: The dry-run diff and hashes of a conditional write (in the detail only).
    write_plan: WritePlanOut | None = None


class ApprovalDecisionIn(Strict):
    decision: Literal["approve", "reject"]
    reason: str = Field(
        default="",
        max_length=2000,
        description="Why: required to reject (the model is told it) and to decide a compensation.",
    )


class ApprovalListQuery(Schema):
    """A query, not a body: an undeclared parameter is refused by ``reject_unknown_query``."""

    state: Literal[
        "open", "pending", "approved", "rejected", "consumed", "invalidated", "expired"
    ] = "open"
    #: Only requests with a smaller id (the next page after the last one seen).
    before: int | None = Field(default=None, ge=1, le=2**62)
    limit: int = Field(default=50, ge=1, le=200)


class ApprovalPolicyIn(Strict):
    """Ask a human before a matching action first runs (DESIGN section 5): every part named
    must match. ``tool`` is a glob on the tool's name; ``path``, ``operator`` and ``value`` a
    condition on an argument (``amount`` ``gt`` 100; a call without the argument does not
    match, one the operator cannot compare does); ``write_prefix`` the start of a write plan's
    path; ``combination_id`` one version combination. Reads are never asked."""

    name: str = Field(min_length=1, max_length=100, pattern=r"^[^\u0000-\u001f\u007f]+$")
    reason: str = Field(min_length=1, max_length=500)
    tool: str = Field(default="", max_length=200)
    path: str = Field(default="", max_length=200)
    operator: Literal["", "gt", "gte", "lt", "lte", "eq", "ne", "prefix", "contains"] = ""
    value: str | float | int | bool | None = None
    write_prefix: str = Field(default="", max_length=200)
    combination_id: PositiveInt | None = None


class ApprovalPolicyOut(Schema):
    id: int
    name: str
    reason: str
    tool: str
    path: str
    operator: str
    value: Any
    write_prefix: str
    combination_id: int | None
    #: What it asks for, in one line.
    asks_for: str
    created_by: str
    created_at: ApiDateTime
