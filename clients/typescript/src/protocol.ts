/**
 * The Agent Ledger protocol as a state machine with no I/O, the same one the Python client runs
 * (`agent_ledger_client.protocol`).
 *
 * Every operation is a *flow*: a generator that yields actions (`send` a request, `sleep`,
 * `execute` the tool) and is given the replies (a response or a transport failure, nothing, the
 * tool's outcome). The client (`client.ts`) is a driver that only performs the actions, so the
 * decisions are made here, once: send, wait, execute, report, replay.
 *
 * The client's side of the server contract: every request says how long its caller still waits
 * (`X-Ledger-Timeout-Ms`); store trouble (5xx, `503` with `Retry-After`) is retried with
 * jittered back-off within the client's time budget, then a call fails closed; the heartbeat runs
 * every `lease.seconds / 3` on the client's own monotonic clock; `complete` is retried with the
 * same fencing token for at least the lease length; a refused `complete` returns the server's
 * observation instead of throwing.
 *
 * Defence in depth against a ledger that lost data (a failover to a standby that lacked its last
 * commits): the protocol remembers the keys it ran and the highest fencing token it ran each
 * under. A `complete` answered 404 for a call it ran means the ledger forgot it: that key is
 * never run again by this protocol object; an `execute` for a key it already ran, with a fencing
 * token no higher, is not run either but reported uncertain. Read-only tools are exempt.
 */

import {
  forgotten,
  normalised,
  type Observation,
  startRefused,
  unavailable,
  unreported,
} from "./observations.js";
import { LedgerRequestError, LedgerUnavailableError, ToolError } from "./errors.js";

export const DEFAULT_TOOL_TIMEOUT = 30; // seconds
export const DEFAULT_WAIT_DEADLINE = 60;
export const DEFAULT_APPROVAL_DEADLINE = 60;
/** The lease length assumed when an answer does not say (the server's default). */
export const DEFAULT_LEASE_SECONDS = 60;
/** How long a cancelled call may spend reporting itself uncertain. */
export const CANCEL_REPORT_SECONDS = 2;
export const TIMEOUT_HEADER = "X-Ledger-Timeout-Ms";
/** How many keys a protocol object remembers having run (the newest), with their tokens. */
export const RAN_KEYS = 10_000;

/** Tools the client may run without the ledger (read-only by nature); the rest fail closed. */
export const KNOWN_IDEMPOTENT_TOOLS: ReadonlySet<string> = new Set([
  "read_file",
  "list_files",
  "search_code",
  "get_order_status",
  "pure_compute",
]);

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type Body = Record<string, unknown>;

/** Handed to your tool function: pass `idempotencyKey` to the downstream. */
export interface CallContext {
  callId: string;
  runId: string;
  stepId: string;
  tool: string;
  input: Body;
  idempotencyKey: string;
  fencingToken: number;
}

/** A tool: given its call's context and a signal that fires when the call is abandoned. */
export type ToolFunction = (context: CallContext, signal: AbortSignal) => unknown;

// --- what a flow asks its driver to do ----------------------------------------------------
export interface LedgerRequest {
  method: string;
  path: string;
  json?: unknown;
  params?: Record<string, string>;
  /** Seconds the caller waits for this request. */
  timeout: number;
  /** The W3C trace context to pass on. */
  traceparent?: string;
}

export interface Send {
  kind: "send";
  request: LedgerRequest;
}
export interface Sleep {
  kind: "sleep";
  seconds: number;
}
/**
 * Run the tool with a timeout; while it runs, heartbeat every `heartbeatEvery` seconds (`null`:
 * there is no lease to keep, the tool runs without the ledger).
 */
export interface Execute {
  kind: "execute";
  execute: ToolFunction;
  context: CallContext;
  timeout: number;
  heartbeatEvery: number | null;
}
export type Action = Send | Sleep | Execute;

// --- what the driver gives back ----------------------------------------------------------
export interface Response {
  kind: "response";
  status: number;
  body: unknown;
  retryAfter: number | null;
}
export interface TransportFailure {
  kind: "failure";
  reason: string;
}
export interface Executed {
  kind: "executed";
  outcome: "succeeded" | "failed" | "uncertain";
  result?: unknown;
  error?: ToolError;
  cancelled: boolean;
}
export type Answer = Response | TransportFailure;
export type Reply = Answer | Executed | undefined;
export type Flow<T> = Generator<Action, T, Reply>;

export function requestHeaders(request: LedgerRequest): Record<string, string> {
  const headers: Record<string, string> = {
    [TIMEOUT_HEADER]: String(Math.max(1, Math.floor(request.timeout * 1000))),
  };
  if (request.traceparent) headers.traceparent = request.traceparent;
  return headers;
}

/** A driver's HTTP answer as the protocol reads it. */
export function responseOf(status: number, retryAfter: string | null, text: string): Response {
  let body: unknown = null;
  if (text) {
    try {
      body = JSON.parse(text);
    } catch {
      body = { code: "HTTP_ERROR", detail: text.slice(0, 500) };
    }
  }
  const seconds = retryAfter === null || retryAfter === "" ? NaN : Number(retryAfter);
  return { kind: "response", status, body, retryAfter: Number.isFinite(seconds) ? seconds : null };
}

// --- a model turn's calls in one request -----------------------------------------------------
/** The most calls one `POST /calls/batch` takes (the ledger's limit). */
export const MAX_BATCH_CALLS = 32;

/** Whether `request` asks the ledger about a new call (`POST /calls`): such requests, made
 * together, may go as one batch. */
export function firstAsk(request: LedgerRequest): boolean {
  return request.method === "POST" && request.path === "/calls" && request.params === undefined;
}

/** One `POST /calls/batch` for `requests` (at most `MAX_BATCH_CALLS` first asks under one trace
 * context): it waits as long as the least patient of them. */
export function batchRequest(requests: LedgerRequest[]): LedgerRequest {
  const batch: LedgerRequest = {
    method: "POST",
    path: "/calls/batch",
    json: { calls: requests.map((request) => request.json) },
    timeout: Math.min(...requests.map((request) => request.timeout)),
  };
  if (requests[0]?.traceparent !== undefined) batch.traceparent = requests[0].traceparent;
  return batch;
}

/**
 * Each call's reply within a batch's `reply`, as it would have had alone: its status, its
 * answer or problem and its `Retry-After`. A lost connection, store trouble or a refused token
 * is every call's reply (each then retries as it would alone). Null when the ledger refused the
 * batch as such (no batch route, a body refused whole): then each call is sent alone, and a
 * call the batch did record is answered as its retry.
 */
export function batchReplies(reply: Answer, count: number): Answer[] | null {
  if (reply.kind === "failure" || reply.status >= 500 || reply.status === 401 || reply.status === 403) {
    return Array.from({ length: count }, () => reply);
  }
  const body = reply.body as { results?: unknown } | null;
  const results = body !== null && typeof body === "object" ? body.results : undefined;
  if (reply.status !== 200 || !Array.isArray(results) || results.length !== count) return null;
  const items = results as BatchItem[];
  if (!items.every((item) => typeof item === "object" && item !== null && Number.isInteger(item.status))) {
    return null;
  }
  return items.map((item) => ({
    kind: "response",
    status: item.status,
    body: item.call ?? item.problem ?? null,
    retryAfter: typeof item.retry_after === "number" ? item.retry_after : null,
  }));
}

/** One call's result in a batch's answer, as the ledger sends it. */
interface BatchItem {
  status: number;
  call?: unknown;
  problem?: unknown;
  retry_after?: unknown;
}

/** Whether `reply` to a batch says the ledger has no batch route (an older ledger). */
export function withoutBatches(reply: Answer): boolean {
  return reply.kind === "response" && (reply.status === 404 || reply.status === 405);
}

/**
 * How a tool that threw ended: a `ToolError` is a definite failure; anything else (a timeout, a
 * lost connection, a cancel) may have happened after the effect, so it is uncertain.
 */
export function executedAfter(error: unknown, cancelled = false): Executed {
  if (error instanceof ToolError && !cancelled) {
    return { kind: "executed", outcome: "failed", error, cancelled };
  }
  return { kind: "executed", outcome: "uncertain", cancelled };
}

export function heartbeatRequest(context: CallContext, timeout: number): LedgerRequest {
  return {
    method: "POST",
    path: `/calls/${context.callId}/heartbeat`,
    json: { fencing_token: context.fencingToken },
    timeout,
  };
}

/** Seconds until the next heartbeat, or null when the lease is gone (refused). */
export function nextHeartbeat(reply: Answer, every: number): number | null {
  if (reply.kind === "failure" || reply.status >= 500) return every; // the lease may still hold
  if (reply.status >= 400) return null;
  const seconds = isObject(reply.body) ? reply.body.lease_seconds : undefined;
  return typeof seconds === "number" && seconds > 0 ? seconds / 3 : every;
}

/**
 * Full-jitter exponential back-off, never shorter than the server's Retry-After (plus a little
 * jitter, so callers told the same Retry-After do not return together).
 */
export function backoff(
  attempt: number,
  retryAfter: number | null,
  cap = 5,
  random: () => number = Math.random,
): number {
  if (retryAfter) return retryAfter + random() * Math.min(1, retryAfter / 4);
  const base = Math.min(cap, 0.2 * 2 ** attempt);
  return base / 2 + random() * (base / 2);
}

function isObject(value: unknown): value is Body {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function problem(reply: Response): Body {
  return isObject(reply.body) ? reply.body : { code: "HTTP_ERROR", detail: String(reply.body) };
}

/** The JSON of a successful answer; throws for a refusal or an unreachable ledger. */
export function parsed(reply: Answer): unknown {
  if (reply.kind === "failure") throw new LedgerUnavailableError(reply.reason);
  if (reply.status >= 500) {
    throw new LedgerUnavailableError(`HTTP ${reply.status} ${String(problem(reply).code ?? "")}`);
  }
  if (reply.status >= 400) throw new LedgerRequestError(reply.status, problem(reply));
  return reply.body;
}

function reasonOf(reply: Answer): string {
  if (reply.kind === "failure") return reply.reason;
  return `HTTP ${reply.status} ${String(problem(reply).code ?? "")}`.trim();
}

export interface CallOptions {
  stepId?: string;
  businessObjectId?: string;
  /** Seconds the tool may run. */
  timeout?: number;
  inputSource?: string;
  dataClassification?: string;
  endUserId?: string;
  writePlan?: Body;
  waitDeadline?: number;
  approvalDeadline?: number;
  /** False: an `approval_required` decision returns `APPROVAL_REQUIRED` at once. */
  waitForApproval?: boolean;
  maxReplays?: number;
  /** A W3C `traceparent` for the ledger's spans of this call. */
  traceparent?: string;
}

/**
 * The step id when the caller gives none: a fresh one per call. The action is the ledger's to
 * identify (a call of a tool with side effects is the same action as every call of the same
 * tool and arguments in the run, whatever its step), so a retried write cannot run twice.
 */
export function defaultStepId(tool: string): string {
  return `${tool}:${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`;
}

export function callBody(runId: string, tool: string, input: Body, options: CallOptions): Body {
  const body: Body = {
    run_id: runId,
    step_id: options.stepId || defaultStepId(tool),
    tool,
    input,
    input_source: options.inputSource ?? "model",
    data_classification: options.dataClassification ?? "internal",
    end_user_id: options.endUserId ?? "",
  };
  if (options.businessObjectId) body.business_object_id = options.businessObjectId;
  if (options.writePlan) body.write_plan = options.writePlan;
  return body;
}

interface Lease {
  fencing_token?: number;
  seconds?: number;
}

function leaseOf(call: Body): Lease {
  return isObject(call.lease) ? (call.lease as Lease) : {};
}

export function contextFrom(call: Body, input: Body): CallContext {
  return {
    callId: String(call.call_id),
    runId: String(call.run_id),
    stepId: String(call.step_id),
    tool: String(call.tool),
    input,
    idempotencyKey: String(call.idempotency_key),
    fencingToken: Math.trunc(Number(leaseOf(call).fencing_token ?? 0)),
  };
}

/** The lease length granted, as the server says it; never read off a server timestamp. */
export function leaseSeconds(call: Body): number {
  const seconds = leaseOf(call).seconds;
  return typeof seconds === "number" && seconds > 0 ? seconds : DEFAULT_LEASE_SECONDS;
}

export function completeBody(context: CallContext, done: Executed): Body {
  const body: Body = { fencing_token: context.fencingToken, outcome: done.outcome };
  if (done.outcome === "succeeded") body.result = done.result ?? null;
  if (done.error !== undefined) {
    body.error = { code: done.error.code, message: done.error.message.slice(0, 4000) };
    body.retryable = done.error.retryable;
  }
  return body;
}

export interface ProtocolSettings {
  /** Seconds one request may take. */
  requestTimeout?: number;
  /** Seconds a request keeps trying an unreachable or overloaded ledger. */
  ledgerBudget?: number;
  /** Seconds each tool may run, by name. */
  toolTimeouts?: Record<string, number>;
  /** A monotonic clock in seconds. */
  clock?: () => number;
  random?: () => number;
}

/** One tenant's conversation with the ledger, as flows. Holds no connection. */
export class LedgerProtocol {
  readonly requestTimeout: number;
  readonly ledgerBudget: number;
  readonly toolTimeouts: Record<string, number>;
  readonly idempotentTools: Set<string>;
  private readonly clock: () => number;
  private readonly random: () => number;
  /** Keys this object ran, with the highest fencing token each ran under (newest last). */
  private readonly ran = new Map<string, number>();

  constructor(settings: ProtocolSettings = {}) {
    this.requestTimeout = settings.requestTimeout ?? 10;
    this.ledgerBudget = settings.ledgerBudget ?? this.requestTimeout * 3;
    this.toolTimeouts = { ...(settings.toolTimeouts ?? {}) };
    this.idempotentTools = new Set(KNOWN_IDEMPOTENT_TOOLS);
    this.clock = settings.clock ?? (() => performance.now() / 1000);
    this.random = settings.random ?? Math.random;
  }

  // --- what this runtime ran --------------------------------------------------------------
  private remember(key: string, token: number): void {
    const before = this.ran.get(key) ?? 0;
    this.ran.delete(key);
    this.ran.set(key, Math.max(token, before));
    while (this.ran.size > RAN_KEYS) {
      const oldest = this.ran.keys().next().value;
      if (oldest === undefined) break;
      this.ran.delete(oldest);
    }
  }

  /**
   * Whether this object ran the context's key under a token at least as high, or the ledger
   * forgot a call of it: an `execute` for it means the ledger lost its record.
   */
  alreadyRan(context: CallContext): boolean {
    const ran = this.ran.get(context.idempotencyKey);
    return ran !== undefined && context.fencingToken <= ran;
  }

  // --- plumbing ---------------------------------------------------------------------------
  /**
   * One request, retried on transport errors and 5xx (honouring `Retry-After`, with jitter)
   * while the time budget lasts; the last reply when it runs out.
   */
  *exchange(
    method: string,
    path: string,
    extra: { json?: unknown; params?: Record<string, string>; budget?: number; traceparent?: string } = {},
  ): Flow<Answer> {
    const deadline = this.clock() + (extra.budget ?? this.ledgerBudget);
    for (let attempt = 0; ; attempt += 1) {
      const timeout = Math.min(this.requestTimeout, Math.max(0.1, deadline - this.clock()));
      const request: LedgerRequest = { method, path, timeout };
      if (extra.json !== undefined) request.json = extra.json;
      if (extra.params !== undefined) request.params = extra.params;
      if (extra.traceparent !== undefined) request.traceparent = extra.traceparent;
      const reply = answerOf(yield { kind: "send", request });
      if (reply.kind === "response" && reply.status < 500) return reply;
      const retryAfter = reply.kind === "response" ? reply.retryAfter : null;
      const delay = backoff(attempt, retryAfter, 5, this.random);
      if (this.clock() + delay >= deadline) return reply;
      yield { kind: "sleep", seconds: delay };
    }
  }

  /** Any API request; its JSON answer, or a `LedgerRequestError`. */
  *request(method: string, path: string, json?: unknown): Flow<unknown> {
    return parsed(yield* this.exchange(method, path, { json }));
  }

  private learn(tools: Body[]): void {
    for (const tool of tools) {
      const classification = tool.classification as Body | undefined;
      if (classification?.idempotency === "idempotent") this.idempotentTools.add(String(tool.name));
    }
  }

  // --- the registry -----------------------------------------------------------------------
  /** Declare a tool; the server computes its classification. */
  *registerTool(
    name: string,
    declared: {
      idempotency?: string;
      outputSchema?: Body;
      keyScope?: string;
      keyFields?: string[];
      description?: string;
    } = {},
  ): Flow<Body> {
    const body: Body = { name };
    if (declared.idempotency) body.idempotency = declared.idempotency;
    if (declared.outputSchema) body.output_schema = declared.outputSchema;
    if (declared.keyScope) body.key_scope = declared.keyScope;
    if (declared.keyFields?.length) body.key_fields = declared.keyFields;
    if (declared.description) body.description = declared.description;
    const tool = (yield* this.request("POST", "/tools", body)) as Body;
    this.learn([tool]);
    return tool;
  }

  /**
   * Import an MCP server's `tools/list` result; the ledger re-classifies every tool. `keyFields`
   * names what identifies some tools' business action (by their name on the server);
   * `implementation` is the name the server gave itself (`serverInfo.name`).
   */
  *importMcpTools(
    server: string,
    trust: string,
    toolsList: { tools: unknown[] },
    extra: { keyFields?: Record<string, string[]>; implementation?: string } = {},
  ): Flow<Body[]> {
    const body: Body = { server, trust, tools_list: toolsList };
    if (extra.keyFields && Object.keys(extra.keyFields).length) body.key_fields = extra.keyFields;
    if (extra.implementation) body.implementation = extra.implementation;
    const tools = (yield* this.request("POST", "/tools/import-mcp", body)) as Body[];
    this.learn(tools);
    return tools;
  }

  /** The idempotency record of a key, or null. */
  *lookup(idempotencyKey: string): Flow<Body | null> {
    const reply = yield* this.exchange("GET", "/records", { params: { key: idempotencyKey } });
    if (reply.kind === "response" && reply.status === 404) return null;
    return parsed(reply) as Body;
  }

  /** A call with its current observation. */
  *getCall(callId: string): Flow<Body> {
    return (yield* this.request("GET", `/calls/${callId}`)) as Body;
  }

  /** Start a run; idempotent for a given `runId`. */
  *startRun(start: { userId: string; runId?: string; combinationId?: number }): Flow<Body> {
    const body: Body = { user_id: start.userId };
    if (start.runId) body.run_id = start.runId;
    if (start.combinationId) body.combination_id = start.combinationId;
    return (yield* this.request("POST", "/runs", body)) as Body;
  }

  *finishRun(runId: string, terminationReason: string): Flow<Body> {
    const body = { termination_reason: terminationReason };
    return (yield* this.request("POST", `/runs/${runId}/finish`, body)) as Body;
  }

  /** Approve or reject as the token's owner, a person with the approver role. */
  *decideApproval(approvalId: number, approve: boolean, reason = ""): Flow<Body> {
    const body = { decision: approve ? "approve" : "reject", reason };
    return (yield* this.request("POST", `/approvals/${approvalId}/decide`, body)) as Body;
  }

  // --- the decision loop ------------------------------------------------------------------
  /**
   * Record, decide, execute if allowed, report, and return the model's observation.
   */
  *call(
    runId: string,
    tool: string,
    input: Body,
    execute: ToolFunction,
    options: CallOptions = {},
  ): Flow<Observation> {
    const body = callBody(runId, tool, input, options);
    return yield* this.decide("/calls", body, tool, input, execute, options);
  }

  /**
   * Recover an uncertain or failed call by the ledger's recovery table: replay it, wait for a
   * human's approval, or return why it must not run again.
   */
  *replay(
    callId: string,
    input: Body,
    execute: ToolFunction,
    options: CallOptions & { currentHash?: string } = {},
  ): Flow<Observation> {
    const body: Body = { input };
    if (options.currentHash) body.current_hash = options.currentHash;
    return yield* this.decide(`/calls/${callId}/replay`, body, null, input, execute, options);
  }

  /** Follow the ledger's decisions until there is an observation for the model. */
  private *decide(
    path: string,
    body: Body,
    tool: string | null,
    input: Body,
    execute: ToolFunction,
    options: CallOptions,
  ): Flow<Observation> {
    let replays = 0;
    let attempt = 0;
    const deadline = this.clock() + (options.waitDeadline ?? DEFAULT_WAIT_DEADLINE);
    const traceparent = options.traceparent;
    for (;;) {
      const reply = yield* this.exchange("POST", path, traceparent ? { json: body, traceparent } : { json: body });
      if (reply.kind === "failure" || reply.status >= 500) {
        return yield* this.withoutLedger(tool, input, execute, options, reasonOf(reply));
      }
      const call = reply.body;
      if (reply.status >= 400 && !(isObject(call) && "decision" in call)) {
        throw new LedgerRequestError(reply.status, problem(reply));
      }
      const answer = call as Body;
      const decision = answer.decision;
      if (decision === "execute") {
        const [observation, done] = yield* this.executeCall(answer, input, execute, options);
        const next = observation.metadata.next_action;
        if (next === "replay" && replays < (options.maxReplays ?? 2) && !done.cancelled) {
          replays += 1; // an idempotent call whose outcome is unknown: run it again
          continue;
        }
        return observation;
      }
      if (decision === "wait" && this.clock() < deadline) {
        const remaining = Math.max(0, deadline - this.clock());
        const delay = backoff(attempt, reply.retryAfter, 5, this.random);
        yield { kind: "sleep", seconds: Math.min(delay, remaining) };
        attempt += 1;
        continue;
      }
      if (decision === "approval_required" && (options.waitForApproval ?? true)) {
        return yield* this.awaitApproval(answer, input, execute, options);
      }
      return normalised(answer.observation);
    }
  }

  private timeoutOf(tool: string, options: CallOptions): number {
    return options.timeout ?? this.toolTimeouts[tool] ?? DEFAULT_TOOL_TIMEOUT;
  }

  /** Fail closed: only a read-only tool runs while the ledger is unreachable. */
  private *withoutLedger(
    tool: string | null,
    input: Body,
    execute: ToolFunction,
    options: CallOptions,
    reason: string,
  ): Flow<Observation> {
    if (tool === null || !this.idempotentTools.has(tool)) {
      return unavailable(tool ?? "the tool", reason);
    }
    const context: CallContext = {
      callId: "",
      runId: "",
      stepId: options.stepId ?? "",
      tool,
      input,
      idempotencyKey: "",
      fencingToken: 0,
    };
    const timeout = this.timeoutOf(tool, options);
    const done = executedOf(yield { kind: "execute", execute, context, timeout, heartbeatEvery: null });
    if (done.outcome === "succeeded") return unavailable(tool, reason, { result: done.result });
    return unreported(tool, done.outcome, "", "");
  }

  private *executeCall(
    call: Body,
    input: Body,
    execute: ToolFunction,
    options: CallOptions,
  ): Flow<[Observation, Executed]> {
    const context = contextFrom(call, input);
    const lease = leaseSeconds(call);
    const guarded = !this.idempotentTools.has(context.tool);
    if (guarded && this.alreadyRan(context)) {
      const notRun: Executed = { kind: "executed", outcome: "uncertain", cancelled: false };
      yield* this.complete(context, notRun, lease, options.traceparent);
      return [forgotten(context.tool, context.callId, context.idempotencyKey), notRun];
    }
    if (guarded) this.remember(context.idempotencyKey, context.fencingToken);
    const timeout = this.timeoutOf(context.tool, options);
    const done = executedOf(
      yield { kind: "execute", execute, context, timeout, heartbeatEvery: lease / 3 },
    );
    return [yield* this.complete(context, done, lease, options.traceparent), done];
  }

  /**
   * Report the outcome with the same fencing token until the ledger answers (for at least the
   * lease length; a cancelled call only briefly). A refusal (409) carries the observation the
   * model gets; without one the outcome is uncertain.
   */
  private *complete(
    context: CallContext,
    done: Executed,
    lease: number,
    traceparent?: string,
  ): Flow<Observation> {
    const budget = done.cancelled ? CANCEL_REPORT_SECONDS : Math.max(lease, this.requestTimeout);
    const extra: { json: Body; budget: number; traceparent?: string } = {
      json: completeBody(context, done),
      budget,
    };
    if (traceparent) extra.traceparent = traceparent;
    const reply = yield* this.exchange("POST", `/calls/${context.callId}/complete`, extra);
    if (reply.kind === "response" && reply.status === 404) {
      // No such call: the ledger lost the record of one this runtime ran.
      this.remember(context.idempotencyKey, Number.POSITIVE_INFINITY);
    } else if (reply.kind === "response" && isObject(reply.body) && reply.status < 500) {
      const observation = reply.body.observation;
      if (isObject(observation)) return normalised(observation);
    }
    return unreported(context.tool, done.outcome, context.callId, context.idempotencyKey);
  }

  /**
   * Follow a call the ledger holds for a human until the approval is decided or the approval
   * deadline passes: once approved it is started with `input`, which must be the approved
   * action's own; rejected, the model gets the reason.
   */
  *resume(callId: string, input: Body, execute: ToolFunction, options: CallOptions = {}): Flow<Observation> {
    const latest = yield* this.getCall(callId);
    return yield* this.awaitApproval(latest, input, execute, options);
  }

  private *awaitApproval(
    call: Body,
    input: Body,
    execute: ToolFunction,
    options: CallOptions,
  ): Flow<Observation> {
    const deadline = this.clock() + (options.approvalDeadline ?? DEFAULT_APPROVAL_DEADLINE);
    let latest = call;
    for (let attempt = 0; this.clock() < deadline; attempt += 1) {
      const reply = yield* this.exchange("GET", `/calls/${String(call.call_id)}`);
      if (reply.kind === "response" && reply.status < 400 && isObject(reply.body)) {
        latest = reply.body;
        const approval = latest.approval_state;
        if (approval === "approved") return yield* this.start(latest, input, execute, options);
        if (approval === "rejected" || approval === "invalidated" || approval === "expired") {
          return normalised(latest.observation);
        }
        const settled = latest.record_state;
        if (settled === "succeeded" || (settled === "failed_final" && approval !== "pending")) {
          return normalised(latest.observation);
        }
      }
      const remaining = Math.max(0, deadline - this.clock());
      yield { kind: "sleep", seconds: Math.min(backoff(attempt, null, 2, this.random), remaining) };
    }
    return normalised(latest.observation);
  }

  /**
   * Start an approved call with `input` and run it. The ledger refuses an input other than the
   * approved action's (422) or an approval it cannot use (409): nothing runs.
   */
  private *start(call: Body, input: Body, execute: ToolFunction, options: CallOptions): Flow<Observation> {
    const reply = yield* this.exchange("POST", `/calls/${String(call.call_id)}/start`, {
      json: { input },
    });
    if (reply.kind === "response" && (reply.status === 409 || reply.status === 422)) {
      return startRefused(String(call.tool ?? "the tool"), problem(reply));
    }
    const started = parsed(reply) as Body;
    if (started.decision !== "execute") return normalised(started.observation);
    const [observation] = yield* this.executeCall(started, input, execute, options);
    return observation;
  }
}

function answerOf(reply: Reply): Answer {
  if (reply === undefined || reply.kind === "executed") {
    throw new TypeError("a send is answered by a response or a transport failure");
  }
  return reply;
}

function executedOf(reply: Reply): Executed {
  if (reply === undefined || reply.kind !== "executed") {
    throw new TypeError("an execute is answered by the tool's outcome");
  }
  return reply;
}
