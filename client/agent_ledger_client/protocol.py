"""The Agent Ledger protocol as a state machine with no I/O, in the sans-IO habit of h11 and
wsproto.

Every operation is a *flow*: a generator that yields actions (``Send`` a request, ``Sleep``,
``Execute`` the tool) and is sent the replies (a ``Response`` or ``TransportFailure``, nothing,
an ``Executed``). The sync and async clients are drivers that only perform the actions, so they
follow exactly the same decisions: send, wait, execute, report, replay.

The client's side of the server contract lives here: every request says how long its caller
still waits (``X-Ledger-Timeout-Ms``); store trouble (5xx, ``503`` with ``Retry-After``) is
retried with jittered backoff within the client's time budget, then a call fails closed; the
heartbeat runs every ``lease.seconds / 3`` on the client's own monotonic clock; ``complete`` is
retried with the same fencing token for at least the lease length; a refused ``complete``
returns the server's observation instead of raising.

Defence in depth against a ledger that lost data (a failover to a standby that lacked its last
commits, docs/deploy.md): the protocol remembers, in memory, the keys it ran and the highest
fencing token it ran each under (the newest ``RAN_KEYS``). A ``complete`` answered 404 for a
call it ran means the ledger forgot it: that key is never run again by this protocol object.
And an ``execute`` for a key it already ran, with a fencing token no higher than the one it ran
under (a record's tokens only grow, so this is a record made anew), is not run either: it is
reported uncertain, so the ledger looks it up downstream, and the model is told
``SIDE_EFFECT_UNCERTAIN``. Read-only tools (``idempotent_tools``) are exempt: running one
again is harmless. The memory is the process's: share one client between a runtime's tasks.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agent_ledger_client.errors import LedgerRequestError, LedgerUnavailableError, ToolError
from agent_ledger_client.observations import (
    forgotten,
    normalised,
    start_refused,
    unavailable,
    unreported,
)

DEFAULT_TOOL_TIMEOUT = 30.0  # seconds; seed 001's timeout_seconds
DEFAULT_WAIT_DEADLINE = 60.0
DEFAULT_APPROVAL_DEADLINE = 60.0
#: The lease length assumed when an answer does not say (the server's default).
DEFAULT_LEASE_SECONDS = 60
#: How long a cancelled call may spend reporting itself uncertain before the cancel goes on.
CANCEL_REPORT_SECONDS = 2.0
TIMEOUT_HEADER = "X-Ledger-Timeout-Ms"
#: How many keys a protocol object remembers having run (the newest), with their tokens.
RAN_KEYS = 10_000

#: Tools the client may run without the ledger (read-only by nature). Everything else fails
#: closed: if the ledger cannot be reached, it is not executed.
KNOWN_IDEMPOTENT_TOOLS = frozenset(
    {"read_file", "list_files", "search_code", "get_order_status", "pure_compute"}
)

T = TypeVar("T")


@dataclass(frozen=True)
class CallContext:
    """Handed to your ``execute`` function: pass ``idempotency_key`` to the downstream."""

    call_id: str
    run_id: str
    step_id: str
    tool: str
    input: dict[str, Any]
    idempotency_key: str
    fencing_token: int


# --- what a flow asks its driver to do -------------------------------------------------------
@dataclass(frozen=True)
class Request:
    """One HTTP request to the ledger; ``timeout`` is how long the caller waits for it."""

    method: str
    path: str
    json: Any = None
    params: dict[str, str] | None = None
    timeout: float = 10.0
    #: The W3C trace context the caller gave (the driver adds the ambient one otherwise).
    traceparent: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        headers = {TIMEOUT_HEADER: str(max(1, int(self.timeout * 1000)))}
        if self.traceparent:
            headers["traceparent"] = self.traceparent
        return headers


@dataclass(frozen=True)
class Send:
    request: Request


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Execute:
    """Run the tool with a timeout; while it runs, heartbeat every ``heartbeat_every`` seconds
    (``None``: there is no lease to keep, the tool runs without the ledger)."""

    execute: Callable[[CallContext], Any]
    context: CallContext
    timeout: float
    heartbeat_every: float | None


# --- what the driver sends back --------------------------------------------------------------
@dataclass(frozen=True)
class Response:
    status: int
    body: Any
    retry_after: float | None = None


@dataclass(frozen=True)
class TransportFailure:
    reason: str


@dataclass(frozen=True)
class Executed:
    outcome: str  # succeeded, failed or uncertain
    result: Any = None
    error: ToolError | None = None
    cancelled: bool = False


Action = Send | Sleep | Execute
Reply = Response | TransportFailure | Executed | None
Flow = Generator[Action, Reply, T]


def api_base(base_url: str) -> str:
    return base_url.rstrip("/") + "/api/v1"


def auth_headers(token: str, agent_id: str) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if agent_id:
        headers["X-Agent-Id"] = agent_id
    return headers


def response_of(status: int, headers: Mapping[str, str], content: bytes) -> Response:
    """A driver's HTTP answer as the protocol reads it."""
    try:
        body: Any = json.loads(content) if content else None
    except ValueError:
        body = {"code": "HTTP_ERROR", "detail": content[:500].decode(errors="replace")}
    try:
        retry_after: float | None = float(headers.get("Retry-After", ""))
    except ValueError:
        retry_after = None
    return Response(status, body, retry_after)


def executed_after(error: BaseException) -> Executed:
    """How a tool that raised ended: a ``ToolError`` is a definite failure; a cancel or any
    other exception (timeouts, lost connections) may have happened, so it is uncertain."""
    if isinstance(error, ToolError):
        return Executed("failed", error=error)
    return Executed("uncertain", cancelled=not isinstance(error, Exception))


def heartbeat_request(context: CallContext, timeout: float) -> Request:
    return Request(
        "POST",
        f"/calls/{context.call_id}/heartbeat",
        {"fencing_token": context.fencing_token},
        timeout=timeout,
    )


def next_heartbeat(reply: Response | TransportFailure, every: float) -> float | None:
    """Seconds until the next heartbeat, or None when the lease is gone (refused)."""
    if isinstance(reply, TransportFailure) or reply.status >= 500:
        return every  # the lease may still hold; keep trying
    if reply.status >= 400:
        return None
    seconds = reply.body.get("lease_seconds") if isinstance(reply.body, dict) else None
    return seconds / 3 if isinstance(seconds, int | float) and seconds > 0 else every


def backoff(attempt: int, retry_after: float | None, cap: float = 5.0) -> float:
    """Full-jitter exponential backoff, never shorter than the server's Retry-After (plus a
    little jitter, so callers told the same Retry-After do not return together)."""
    base = min(cap, 0.2 * (2**attempt))
    delay = random.uniform(base / 2, base)  # noqa: S311 - jitter, not security
    if retry_after:
        return retry_after + random.uniform(0, min(1.0, retry_after / 4))  # noqa: S311
    return delay


def problem(reply: Response) -> dict[str, Any]:
    body = reply.body
    return body if isinstance(body, dict) else {"code": "HTTP_ERROR", "detail": str(body)}


def parsed(reply: Response | TransportFailure) -> Any:
    """The JSON of a successful answer; raises for a refusal or an unreachable ledger."""
    if isinstance(reply, TransportFailure):
        raise LedgerUnavailableError(reply.reason)
    if reply.status >= 500:
        raise LedgerUnavailableError(f"HTTP {reply.status} {problem(reply).get('code', '')}")
    if reply.status >= 400:
        raise LedgerRequestError(reply.status, problem(reply))
    return reply.body


@dataclass
class CallOptions:
    step_id: str | None = None
    business_object_id: str | None = None
    timeout: float | None = None
    input_source: str = "model"
    data_classification: str = "internal"
    end_user_id: str = ""
    write_plan: dict[str, Any] | None = None
    wait_deadline: float = DEFAULT_WAIT_DEADLINE
    approval_deadline: float = DEFAULT_APPROVAL_DEADLINE
    #: False: an ``approval_required`` decision returns ``APPROVAL_REQUIRED`` at once.
    wait_for_approval: bool = True
    max_replays: int = 2
    #: A W3C ``traceparent`` for the ledger's spans of this call (the MCP guard's ``_meta``);
    #: without one the drivers send the caller's current OpenTelemetry context, if any.
    traceparent: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def default_step_id(tool: str) -> str:
    """The step id when the caller gives none: a fresh one per call. The step names this call
    in the ledger; the action is the ledger's to identify (a call of a tool with side effects
    is the same action as every call of the same tool and arguments in the run, whatever its
    step), so a read reads again and a retried write cannot run twice."""
    return f"{tool}:{uuid.uuid4().hex[:16]}"


def call_body(
    run_id: str, tool: str, tool_input: dict[str, Any], options: CallOptions
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "run_id": run_id,
        "step_id": options.step_id or default_step_id(tool),
        "tool": tool,
        "input": tool_input,
        "input_source": options.input_source,
        "data_classification": options.data_classification,
        "end_user_id": options.end_user_id,
    }
    if options.business_object_id:
        body["business_object_id"] = options.business_object_id
    if options.write_plan:
        body["write_plan"] = options.write_plan
    return body


# --- a model turn's calls in one request -----------------------------------------------------
#: The most calls one ``POST /calls/batch`` takes (the ledger's limit).
MAX_BATCH_CALLS = 32


def first_ask(request: Request) -> bool:
    """Whether ``request`` asks the ledger about a new call (``POST /calls``): such requests,
    made together, may go as one batch."""
    return request.method == "POST" and request.path == "/calls" and not request.params


def batch_request(requests: Sequence[Request]) -> Request:
    """One ``POST /calls/batch`` for ``requests`` (at most ``MAX_BATCH_CALLS`` first asks under
    one trace context): it waits as long as the least patient of them."""
    return Request(
        "POST",
        "/calls/batch",
        {"calls": [request.json for request in requests]},
        None,
        min(request.timeout for request in requests),
        requests[0].traceparent,
    )


def batch_replies(
    reply: Response | TransportFailure, count: int
) -> list[Response | TransportFailure] | None:
    """Each call's reply within a batch's ``reply``, as it would have had alone: its status,
    its answer or problem and its ``Retry-After``. A lost connection, store trouble or a
    refused token is every call's reply (each then retries as it would alone). None when the
    ledger refused the batch as such (no batch route, a body refused whole): then each call
    is sent alone, and a call the batch did record is answered as its retry."""
    if isinstance(reply, TransportFailure) or reply.status >= 500 or reply.status in (401, 403):
        return [reply] * count
    results = reply.body.get("results") if isinstance(reply.body, dict) else None
    if reply.status != 200 or not isinstance(results, list) or len(results) != count:
        return None
    if not all(isinstance(item, dict) and isinstance(item.get("status"), int) for item in results):
        return None
    return [
        Response(
            int(item["status"]),
            item["call"] if item.get("call") is not None else item.get("problem"),
            item.get("retry_after"),
        )
        for item in results
    ]


def without_batches(reply: Response | TransportFailure) -> bool:
    """Whether ``reply`` to a batch says the ledger has no batch route (an older ledger)."""
    return isinstance(reply, Response) and reply.status in (404, 405)


def context_from(call: dict[str, Any], tool_input: dict[str, Any]) -> CallContext:
    lease = call.get("lease") or {}
    return CallContext(
        call_id=call["call_id"],
        run_id=call["run_id"],
        step_id=call["step_id"],
        tool=call["tool"],
        input=tool_input,
        idempotency_key=call["idempotency_key"],
        fencing_token=int(lease.get("fencing_token", 0)),
    )


def lease_seconds(call: dict[str, Any]) -> float:
    """The lease length granted, as the server says it; never read off a server timestamp."""
    seconds = (call.get("lease") or {}).get("seconds")
    return (
        float(seconds)
        if isinstance(seconds, int | float) and seconds > 0
        else DEFAULT_LEASE_SECONDS
    )


def complete_body(context: CallContext, done: Executed) -> dict[str, Any]:
    body: dict[str, Any] = {"fencing_token": context.fencing_token, "outcome": done.outcome}
    if done.outcome == "succeeded":
        body["result"] = done.result
    if done.error is not None:
        body["error"] = {"code": done.error.code, "message": done.error.message[:4000]}
        body["retryable"] = done.error.retryable
    return body


def _reason(reply: Response | TransportFailure) -> str:
    if isinstance(reply, TransportFailure):
        return reply.reason
    return f"HTTP {reply.status} {problem(reply).get('code', '')}".strip()


class LedgerProtocol:
    """One tenant's conversation with the ledger, as flows. Holds no connection."""

    def __init__(
        self,
        *,
        request_timeout: float = 10.0,
        ledger_budget: float | None = None,
        tool_timeouts: dict[str, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.request_timeout = request_timeout
        #: How long a request keeps trying an unreachable or overloaded ledger.
        self.ledger_budget = request_timeout * 3 if ledger_budget is None else ledger_budget
        self.tool_timeouts = dict(tool_timeouts or {})
        self.idempotent_tools = set(KNOWN_IDEMPOTENT_TOOLS)
        self.clock = clock
        #: Keys this object ran, with the highest fencing token each ran under (``inf``: the
        #: ledger forgot a call of it); the newest ``RAN_KEYS``.
        self._ran: OrderedDict[str, float] = OrderedDict()
        self._ran_lock = threading.Lock()  # one client may serve a runtime's threads

    # --- what this runtime ran -------------------------------------------------------------
    def _remember(self, key: str, token: float) -> None:
        with self._ran_lock:
            self._ran[key] = max(token, self._ran.pop(key, 0))
            while len(self._ran) > RAN_KEYS:
                self._ran.popitem(last=False)

    def already_ran(self, context: CallContext) -> bool:
        """Whether this object ran ``context``'s key under a token at least as high, or the
        ledger forgot a call of it: an ``execute`` for it means the ledger lost its record."""
        with self._ran_lock:
            ran = self._ran.get(context.idempotency_key)
        return ran is not None and context.fencing_token <= ran

    # --- plumbing ---------------------------------------------------------------------------
    def exchange(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        budget: float | None = None,
        traceparent: str | None = None,
    ) -> Flow[Response | TransportFailure]:
        """One request, retried on transport errors and 5xx (honouring ``Retry-After``, with
        jitter) while the time budget lasts; the last reply when it runs out."""
        deadline = self.clock() + (self.ledger_budget if budget is None else budget)
        attempt = 0
        while True:
            timeout = min(self.request_timeout, max(0.1, deadline - self.clock()))
            reply = yield Send(Request(method, path, json, params, timeout, traceparent))
            assert isinstance(reply, Response | TransportFailure)
            if isinstance(reply, Response) and reply.status < 500:
                return reply
            delay = backoff(attempt, reply.retry_after if isinstance(reply, Response) else None)
            if self.clock() + delay >= deadline:
                return reply
            yield Sleep(delay)
            attempt += 1

    def request(self, method: str, path: str, *, json: Any = None) -> Flow[Any]:
        """Any API request; its JSON answer, or ``LedgerRequestError``."""
        return parsed((yield from self.exchange(method, path, json=json)))

    def _learn(self, tools: list[dict[str, Any]]) -> None:
        for tool in tools:
            if tool["classification"]["idempotency"] == "idempotent":
                self.idempotent_tools.add(tool["name"])

    # --- the registry and look-ups ----------------------------------------------------------
    def register_tool(
        self,
        name: str,
        *,
        idempotency: str | None = None,
        output_schema: dict[str, Any] | None = None,
        key_scope: str | None = None,
        key_fields: list[str] | None = None,
        description: str = "",
    ) -> Flow[dict[str, Any]]:
        """Declare a tool; the server computes its classification."""
        body = {
            "name": name,
            "idempotency": idempotency,
            "output_schema": output_schema,
            "key_scope": key_scope,
            "key_fields": key_fields,
            "description": description,
        }
        tool = yield from self.request("POST", "/tools", json={k: v for k, v in body.items() if v})
        self._learn([tool])
        return tool

    def import_mcp_tools(
        self,
        server: str,
        trust: str,
        tools_list: dict[str, Any],
        key_fields: dict[str, list[str]] | None = None,
        implementation: str | None = None,
    ) -> Flow[list[dict[str, Any]]]:
        """Import an MCP server's tools/list result; the ledger re-classifies every tool.
        ``key_fields`` names what identifies some tools' business action (by their name on
        the server: ``{"create_issue": ["repo", "title"]}``); ``implementation`` is the name
        the server gave itself (``serverInfo.name``), by which the ledger knows the reads of
        the reference servers."""
        body: dict[str, Any] = {"server": server, "trust": trust, "tools_list": tools_list}
        if key_fields:
            body["key_fields"] = key_fields
        if implementation:
            body["implementation"] = implementation
        tools = yield from self.request("POST", "/tools/import-mcp", json=body)
        self._learn(tools)
        return tools

    def declare_key_fields(
        self, tool: str, key_fields: list[str], *, key_scope: str | None = None
    ) -> Flow[dict[str, Any]]:
        """Declare what identifies a tool's business action (any tool, an MCP server's too)."""
        body: dict[str, Any] = {"key_fields": key_fields}
        if key_scope:
            body["key_scope"] = key_scope
        return (yield from self.request("PUT", f"/tools/{tool}/key-fields", json=body))

    def classify(self, tool: str, tool_input: dict[str, Any]) -> Flow[dict[str, Any]]:
        """The classification of one call, recording nothing."""
        return (
            yield from self.request(
                "POST", "/tools/classify", json={"tool": tool, "input": tool_input}
            )
        )

    def lookup(self, idempotency_key: str) -> Flow[dict[str, Any] | None]:
        """The idempotency record of a key, or None."""
        reply = yield from self.exchange("GET", "/records", params={"key": idempotency_key})
        if isinstance(reply, Response) and reply.status == 404:
            return None
        return parsed(reply)

    def get_call(self, call_id: str) -> Flow[dict[str, Any]]:
        """A call with its current observation."""
        return (yield from self.request("GET", f"/calls/{call_id}"))

    # --- approvals ---------------------------------------------------------------------------
    def approvals(
        self, *, state: str = "open", before: int | None = None, limit: int = 50
    ) -> Flow[list[dict[str, Any]]]:
        """Approval requests: ``open`` ones (what an approver can still decide, oldest first)
        or those in ``state``; needs the ``approvals:read`` scope."""
        params = {"state": state, "limit": str(limit)}
        if before is not None:
            params["before"] = str(before)
        reply = yield from self.exchange("GET", "/approvals", params=params)
        return parsed(reply)

    def approval(self, approval_id: int) -> Flow[dict[str, Any]]:
        """One approval request with its exact action and dry-run diff."""
        return (yield from self.request("GET", f"/approvals/{approval_id}"))

    def decide_approval(
        self, approval_id: int, *, approve: bool, reason: str = ""
    ) -> Flow[dict[str, Any]]:
        """Approve or reject as the token's owner: a person with the approver role in the
        tenant, none of the action's principals (``approvals:decide``). A rejection needs a
        ``reason``; the model is told it."""
        body = {"decision": "approve" if approve else "reject", "reason": reason}
        return (yield from self.request("POST", f"/approvals/{approval_id}/decide", json=body))

    def start_run(
        self,
        *,
        user_id: str,
        run_id: str | None = None,
        combination_id: int | None = None,
        shadow_of: str | None = None,
    ) -> Flow[dict[str, Any]]:
        """Start a run; with ``shadow_of`` (a live run's id), a shadow run mirroring it, whose
        side-effecting calls the ledger answers ``SHADOW_DRY_RUN`` without executing them."""
        body: dict[str, Any] = {"user_id": user_id}
        if run_id:
            body["run_id"] = run_id
        if combination_id:
            body["combination_id"] = combination_id
        if shadow_of:
            body["shadow"] = True
            body["mirrors_run_id"] = shadow_of
        return (yield from self.request("POST", "/runs", json=body))

    def finish_run(self, run_id: str, termination_reason: str) -> Flow[dict[str, Any]]:
        return (
            yield from self.request(
                "POST", f"/runs/{run_id}/finish", json={"termination_reason": termination_reason}
            )
        )

    # --- the decision loop ------------------------------------------------------------------
    def ask(
        self, run_id: str, tool: str, tool_input: dict[str, Any], **options: Any
    ) -> Flow[Response | TransportFailure]:
        """The ledger's first answer to a call (``call``'s options), executing nothing: for a
        runtime that decides whether to interrupt for a human before it runs the tool. An
        ``execute`` answer holds the call's lease: hand it to ``call(answer=...)`` at once."""
        opts = CallOptions(**options)
        body = call_body(run_id, tool, tool_input, opts)
        return (yield from self.exchange("POST", "/calls", json=body, traceparent=opts.traceparent))

    def call(
        self,
        run_id: str,
        tool: str,
        tool_input: dict[str, Any],
        *,
        execute: Callable[[CallContext], Any],
        answer: Response | TransportFailure | None = None,
        **options: Any,
    ) -> Flow[dict[str, Any]]:
        """Record, decide, execute if allowed, report, and return the model's observation;
        ``answer`` (from ``ask``) is the ledger's first answer, so it is not asked again."""
        opts = CallOptions(**options)
        body = call_body(run_id, tool, tool_input, opts)
        return (yield from self._decide("/calls", body, tool, tool_input, execute, opts, answer))

    def replay(
        self,
        call_id: str,
        tool_input: dict[str, Any],
        *,
        execute: Callable[[CallContext], Any],
        current_hash: str | None = None,
        **options: Any,
    ) -> Flow[dict[str, Any]]:
        """Recover an uncertain or failed call by the ledger's recovery table: replay it,
        wait for a human's approval (a conditional write is first checked against
        ``current_hash``, the file's sha256 now), or return why it must not run again."""
        opts = CallOptions(**options)
        # The ledger checks that the replay runs the recorded action's exact input.
        body: dict[str, Any] = {"input": tool_input}
        if current_hash:
            body["current_hash"] = current_hash
        return (
            yield from self._decide(
                f"/calls/{call_id}/replay", body, None, tool_input, execute, opts
            )
        )

    def _decide(
        self,
        path: str,
        body: dict[str, Any],
        tool: str | None,
        tool_input: dict[str, Any],
        execute: Callable[[CallContext], Any],
        opts: CallOptions,
        answer: Response | TransportFailure | None = None,
    ) -> Flow[dict[str, Any]]:
        """Follow the ledger's decisions (from ``answer``, when given) until there is an
        observation for the model."""
        replays = attempt = 0
        deadline = self.clock() + opts.wait_deadline
        while True:
            if answer is None:
                reply = yield from self.exchange(
                    "POST", path, json=body, traceparent=opts.traceparent
                )
            else:
                reply, answer = answer, None
            if isinstance(reply, TransportFailure) or reply.status >= 500:
                return (
                    yield from self._without_ledger(tool, tool_input, execute, opts, _reason(reply))
                )
            call = reply.body
            if reply.status >= 400 and not (isinstance(call, dict) and "decision" in call):
                raise LedgerRequestError(reply.status, problem(reply))
            decision = call["decision"]
            if decision == "execute":
                observation, done = yield from self._execute(call, tool_input, execute, opts)
                if (
                    observation.get("metadata", {}).get("next_action") == "replay"
                    and replays < opts.max_replays
                    and not done.cancelled
                ):
                    replays += 1  # an idempotent call whose outcome is unknown: run it again
                    continue
                return observation
            if decision == "wait" and self.clock() < deadline:
                remaining = max(0.0, deadline - self.clock())
                yield Sleep(min(backoff(attempt, reply.retry_after), remaining))
                attempt += 1
                continue
            if decision == "approval_required" and opts.wait_for_approval:
                return (yield from self._await_approval(call, tool_input, execute, opts))
            return normalised(call["observation"])

    def _timeout(self, tool: str, opts: CallOptions) -> float:
        return opts.timeout or self.tool_timeouts.get(tool, DEFAULT_TOOL_TIMEOUT)

    def _without_ledger(
        self,
        tool: str | None,
        tool_input: dict[str, Any],
        execute: Callable[[CallContext], Any],
        opts: CallOptions,
        reason: str,
    ) -> Flow[dict[str, Any]]:
        """Fail closed: only a read-only tool runs while the ledger is unreachable."""
        if tool is None or tool not in self.idempotent_tools:
            return unavailable(tool or "the tool", reason)
        context = CallContext("", "", opts.step_id or "", tool, tool_input, "", 0)
        done = yield Execute(execute, context, self._timeout(tool, opts), None)
        assert isinstance(done, Executed)
        if done.outcome == "succeeded":
            return unavailable(tool, reason, result=done.result, executed=True)
        return unreported(tool, done.outcome, "", "")

    def _execute(
        self,
        call: dict[str, Any],
        tool_input: dict[str, Any],
        execute: Callable[[CallContext], Any],
        opts: CallOptions,
    ) -> Flow[tuple[dict[str, Any], Executed]]:
        context = context_from(call, tool_input)
        lease = lease_seconds(call)
        guarded = context.tool not in self.idempotent_tools
        if guarded and self.already_ran(context):
            not_run = Executed("uncertain")
            yield from self._complete(context, not_run, lease, opts.traceparent)
            return forgotten(context.tool, context.call_id, context.idempotency_key), not_run
        if guarded:
            self._remember(context.idempotency_key, context.fencing_token)
        done = yield Execute(execute, context, self._timeout(context.tool, opts), lease / 3)
        assert isinstance(done, Executed)
        return (yield from self._complete(context, done, lease, opts.traceparent)), done

    def _complete(
        self, context: CallContext, done: Executed, lease: float, traceparent: str | None = None
    ) -> Flow[dict[str, Any]]:
        """Report the outcome with the same fencing token until the ledger answers (for at
        least the lease length; a cancelled call only briefly). A refusal (409) carries the
        observation the model gets; without one the outcome is uncertain."""
        budget = CANCEL_REPORT_SECONDS if done.cancelled else max(lease, self.request_timeout)
        reply = yield from self.exchange(
            "POST",
            f"/calls/{context.call_id}/complete",
            json=complete_body(context, done),
            budget=budget,
            traceparent=traceparent,
        )
        if isinstance(reply, Response) and reply.status == 404:
            # No such call: the ledger lost the record of one this runtime ran.
            self._remember(context.idempotency_key, math.inf)
        elif isinstance(reply, Response) and isinstance(reply.body, dict):
            observation = reply.body.get("observation")
            if isinstance(observation, dict) and reply.status < 500:
                return normalised(observation)
        return unreported(context.tool, done.outcome, context.call_id, context.idempotency_key)

    def resume(
        self,
        call_id: str,
        tool_input: dict[str, Any],
        *,
        execute: Callable[[CallContext], Any],
        **options: Any,
    ) -> Flow[dict[str, Any]]:
        """Follow a call the ledger holds for a human (``call_id``: the ``APPROVAL_REQUIRED``
        observation's ``metadata.call_id``) until the approval is decided or
        ``approval_deadline`` passes: once approved it is started with ``tool_input``, which
        must be the approved action's own (another input is refused and nothing runs);
        rejected, the model gets the reason. For a runtime that paused for the approval."""
        opts = CallOptions(**options)
        latest = yield from self.get_call(call_id)
        return (yield from self._await_approval(latest, tool_input, execute, opts))

    def _await_approval(
        self,
        call: dict[str, Any],
        tool_input: dict[str, Any],
        execute: Callable[[CallContext], Any],
        opts: CallOptions,
    ) -> Flow[dict[str, Any]]:
        """Poll the call until a human decides or the approval deadline passes. The approval
        decides: a record already settled ``failed_final`` (a call that failed without effect,
        whose replay is put to a human) waits for it like any other."""
        deadline = self.clock() + opts.approval_deadline
        attempt = 0
        latest = call
        while self.clock() < deadline:
            reply = yield from self.exchange("GET", f"/calls/{call['call_id']}")
            if isinstance(reply, Response) and reply.status < 400:
                latest = reply.body
                approval = latest.get("approval_state")
                if approval == "approved":
                    return (yield from self._start(latest, tool_input, execute, opts))
                if approval in ("rejected", "invalidated", "expired"):
                    return normalised(latest["observation"])
                settled = latest.get("record_state")
                if settled == "succeeded" or (settled == "failed_final" and approval != "pending"):
                    return normalised(latest["observation"])
            remaining = max(0.0, deadline - self.clock())
            yield Sleep(min(backoff(attempt, None, cap=2.0), remaining))
            attempt += 1
        return normalised(latest["observation"])

    def _start(
        self,
        call: dict[str, Any],
        tool_input: dict[str, Any],
        execute: Callable[[CallContext], Any],
        opts: CallOptions,
    ) -> Flow[dict[str, Any]]:
        """Start an approved call with ``tool_input`` and run it. The ledger refuses an input
        other than the approved action's (422) or an approval it cannot use (409): nothing
        runs, and the model is told why."""
        reply = yield from self.exchange(
            "POST", f"/calls/{call['call_id']}/start", json={"input": tool_input}
        )
        if isinstance(reply, Response) and reply.status in (409, 422):
            return start_refused(str(call.get("tool") or "the tool"), problem(reply))
        started = parsed(reply)
        if started["decision"] != "execute":
            return normalised(started["observation"])
        observation, _done = yield from self._execute(started, tool_input, execute, opts)
        return observation
