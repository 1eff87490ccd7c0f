/**
 * The driver: `LedgerClient` and its `Run`.
 *
 *     const ledger = new LedgerClient("http://127.0.0.1:8000", token);
 *     const observation = await ledger.run({ userId: "u-42" }, (run) =>
 *       run.call("create_order", { cart: "c-9" }, createOrder),
 *     );
 *
 * Every operation is a flow of `protocol.ts`; this driver only performs its actions with `fetch`,
 * timers and `AbortSignal`. `call` records the call, executes it only when the ledger says so
 * (handing your function the idempotency key), reports the outcome (a timeout, a lost
 * connection or a cancel is *uncertain*, never a plain failure), returns recorded results for
 * duplicates, backs off while another caller holds the key, and waits for approvals up to a
 * deadline. It returns the observation to hand to the model.
 */

import { LedgerRequestError } from "./errors.js";
import { type Observation, runEnded } from "./observations.js";
import type { components } from "./openapi.js";
import {
  type Action,
  type Answer,
  batchReplies,
  batchRequest,
  type Body,
  type CallOptions,
  executedAfter,
  firstAsk,
  type Execute,
  type Executed,
  type Flow,
  heartbeatRequest,
  type LedgerRequest,
  LedgerProtocol,
  MAX_BATCH_CALLS,
  nextHeartbeat,
  type ProtocolSettings,
  type Reply,
  requestHeaders,
  responseOf,
  type ToolFunction,
  withoutBatches,
} from "./protocol.js";
import { ambientTraceparent } from "./trace.js";

/** The API's own shapes, generated from its OpenAPI document (`src/openapi.ts`). */
export type RunOut = components["schemas"]["RunOut"];
export type CallOut = components["schemas"]["CallOut"];
export type RecordOut = components["schemas"]["RecordOut"];

export interface ClientSettings extends ProtocolSettings {
  /** Sent as `X-Agent-Id`: which agent of the tenant makes the calls. */
  agentId?: string;
  /** Another `fetch` (a proxy's, a test's). */
  fetch?: typeof fetch;
}

/** Cancels a call: fired while the tool runs, the call is reported uncertain. */
export interface Cancellable {
  signal?: AbortSignal;
}

function aborted(signal: AbortSignal | undefined): Error {
  const reason: unknown = signal?.reason;
  return reason instanceof Error ? reason : new DOMException("The call was aborted.", "AbortError");
}

function sleep(seconds: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(aborted(signal));
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, seconds * 1000);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(aborted(signal));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A new call's first ask waiting for its turn to leave (`LedgerClient.askInTurn`). */
interface Asked {
  request: LedgerRequest;
  resolve: (answer: Answer) => void;
  reject: (error: unknown) => void;
}

/** A tenant's connection to Agent Ledger. */
export class LedgerClient {
  readonly apiUrl: string;
  readonly protocol: LedgerProtocol;
  private readonly headers: Record<string, string>;
  private readonly fetcher: typeof fetch;
  /** The runs being started, by what starts them (`startRun`). */
  private readonly starting = new Map<string, Promise<RunOut>>();
  /** The new calls asked since the event loop last turned, by trace context (`askInTurn`). */
  private readonly turns = new Map<string, Asked[]>();
  /** False once the ledger turned a batch away as unknown (an older ledger). */
  private batches = true;

  constructor(baseUrl: string, token: string, settings: ClientSettings = {}) {
    this.apiUrl = `${baseUrl.replace(/\/+$/, "")}/api/v1`;
    this.protocol = new LedgerProtocol(settings);
    this.headers = { Authorization: `Bearer ${token}`, "Content-Type": "application/json" };
    if (settings.agentId) this.headers["X-Agent-Id"] = settings.agentId;
    this.fetcher = settings.fetch ?? fetch;
  }

  /**
   * Start a run (idempotent for a given `runId`). Calls that start the same run at once (a
   * turn's tool calls, each finding its run not started yet) share one request, and so go on
   * together.
   */
  async startRun(start: { userId: string; runId?: string; combinationId?: number }): Promise<Run> {
    if (start.runId === undefined) {
      return new Run(this, (await this.drive(this.protocol.startRun(start))) as RunOut);
    }
    const key = JSON.stringify([start.userId, start.runId, start.combinationId ?? null]);
    let starting = this.starting.get(key);
    if (starting === undefined) {
      starting = this.drive(this.protocol.startRun(start)) as Promise<RunOut>;
      this.starting.set(key, starting);
      const forget = (): void => {
        this.starting.delete(key);
      };
      starting.then(forget, forget);
    }
    return new Run(this, await starting);
  }

  /**
   * A run that is finished when `agent` settles: `completed`, or the error's name if it threw.
   */
  async run<T>(
    start: { userId: string; runId?: string; combinationId?: number },
    agent: (run: Run) => Promise<T> | T,
  ): Promise<T> {
    const run = await this.startRun(start);
    let outcome: T;
    try {
      outcome = await agent(run);
    } catch (error) {
      await run.finish(`error: ${error instanceof Error ? error.name : "Error"}`);
      throw error;
    }
    await run.finish("completed");
    return outcome;
  }

  /**
   * Record, decide, execute if allowed, report: the observation for the model. Here and in
   * `replay` and `resume` the trace context is `traceparent`, else the caller's active
   * OpenTelemetry span's (`trace.ts`).
   */
  async call(
    runId: string,
    tool: string,
    input: Body,
    execute: ToolFunction,
    options: CallOptions & Cancellable = {},
  ): Promise<Observation> {
    const flow = this.protocol.call(runId, tool, input, execute, await traced(options));
    return this.drive(flow, options.signal);
  }

  /** Recover an uncertain or failed call by the ledger's recovery table. */
  async replay(
    callId: string,
    input: Body,
    execute: ToolFunction,
    options: CallOptions & Cancellable & { currentHash?: string } = {},
  ): Promise<Observation> {
    const flow = this.protocol.replay(callId, input, execute, await traced(options));
    return this.drive(flow, options.signal);
  }

  /** Follow a call held for a human until it is decided (see `LedgerProtocol.resume`). */
  async resume(
    callId: string,
    input: Body,
    execute: ToolFunction,
    options: CallOptions & Cancellable = {},
  ): Promise<Observation> {
    return this.drive(
      this.protocol.resume(callId, input, execute, await traced(options)),
      options.signal,
    );
  }

  registerTool(
    name: string,
    declared: Parameters<LedgerProtocol["registerTool"]>[1] = {},
  ): Promise<Body> {
    return this.drive(this.protocol.registerTool(name, declared));
  }

  importMcpTools(
    server: string,
    trust: string,
    toolsList: { tools: unknown[] },
    extra: Parameters<LedgerProtocol["importMcpTools"]>[3] = {},
  ): Promise<Body[]> {
    return this.drive(this.protocol.importMcpTools(server, trust, toolsList, extra));
  }

  /** The idempotency record of a key, or null. */
  async lookup(idempotencyKey: string): Promise<RecordOut | null> {
    return (await this.drive(this.protocol.lookup(idempotencyKey))) as RecordOut | null;
  }

  /** A call with its current observation. */
  async getCall(callId: string): Promise<CallOut> {
    return (await this.drive(this.protocol.getCall(callId))) as CallOut;
  }

  finishRun(runId: string, terminationReason: string): Promise<Body> {
    return this.drive(this.protocol.finishRun(runId, terminationReason));
  }

  decideApproval(approvalId: number, approve: boolean, reason = ""): Promise<Body> {
    return this.drive(this.protocol.decideApproval(approvalId, approve, reason));
  }

  // --- the driver -------------------------------------------------------------------------
  /**
   * Perform the flow's actions until it returns. A `signal` fired while the tool runs makes the
   * call uncertain: it is reported so (briefly) and the abort goes on; fired at any other
   * moment, nothing runs and the abort goes on at once.
   */
  async drive<T>(flow: Flow<T>, signal?: AbortSignal): Promise<T> {
    let reply: Reply;
    for (;;) {
      const step = flow.next(reply);
      if (step.done) return step.value;
      const action: Action = step.value;
      if (action.kind === "execute") {
        const done = await this.execute(action, signal);
        if (done.cancelled) {
          await this.settle(flow, done);
          throw aborted(signal);
        }
        reply = done;
      } else if (action.kind === "sleep") {
        await sleep(action.seconds, signal);
        reply = undefined;
      } else {
        if (signal?.aborted) throw aborted(signal);
        reply = await this.send(action.request);
      }
    }
  }

  /** Send a cancelled call's report; nothing runs again. */
  private async settle(flow: Flow<unknown>, done: Executed): Promise<void> {
    let reply: Reply = done;
    for (;;) {
      const step = flow.next(reply);
      if (step.done || step.value.kind === "execute") break;
      reply =
        step.value.kind === "sleep"
          ? await sleep(step.value.seconds).then(() => undefined)
          : await this.send(step.value.request);
    }
    flow.return(undefined as never);
  }

  /**
   * One request's reply. A new call's first ask (`POST /calls`) goes with the others asked in
   * the same turn of the event loop (the tool calls a framework starts at once for one model
   * turn) as one `POST /calls/batch`: the ledger decides each as it would alone. Nothing waits
   * for a batch to fill: a call asked alone goes alone, at once.
   */
  send(request: LedgerRequest): Promise<Answer> {
    return firstAsk(request) ? this.askInTurn(request) : this.sendAlone(request);
  }

  private askInTurn(request: LedgerRequest): Promise<Answer> {
    try {
      JSON.stringify(request.json);
    } catch {
      return this.sendAlone(request); // fails alone, as it would without a batch
    }
    const key = request.traceparent ?? "";
    let turn = this.turns.get(key);
    if (turn === undefined) {
      turn = [];
      this.turns.set(key, turn);
      const asked = turn;
      // After the promise jobs queued now (the other calls of the turn) have run: Node's
      // setImmediate, else a timer where there is none.
      const later = typeof setImmediate === "function" ? setImmediate : setTimeout;
      later(() => {
        this.turns.delete(key);
        void this.answerTurn(asked);
      });
    }
    const waiting = turn;
    return new Promise((resolve, reject) => waiting.push({ request, resolve, reject }));
  }

  /** Send a turn's calls and hand each caller its reply, or the error that stopped its batch. */
  private async answerTurn(turn: Asked[]): Promise<void> {
    for (let start = 0; start < turn.length; start += MAX_BATCH_CALLS) {
      const chunk = turn.slice(start, start + MAX_BATCH_CALLS);
      try {
        const requests = chunk.map(({ request }) => request);
        let replies: Answer[] | null = null;
        if (chunk.length > 1 && this.batches) {
          const reply = await this.sendAlone(batchRequest(requests));
          this.batches = !withoutBatches(reply);
          replies = batchReplies(reply, chunk.length);
        }
        replies ??= await Promise.all(requests.map((request) => this.sendAlone(request)));
        chunk.forEach(({ resolve }, index) => resolve(replies[index] as Answer));
      } catch (error) {
        for (const { reject } of chunk) reject(error);
      }
    }
  }

  private async sendAlone(request: LedgerRequest): Promise<Answer> {
    const url = new URL(`${this.apiUrl}${request.path}`);
    for (const [name, value] of Object.entries(request.params ?? {})) {
      url.searchParams.set(name, value);
    }
    const init: RequestInit = {
      method: request.method,
      headers: { ...this.headers, ...requestHeaders(request) },
      signal: AbortSignal.timeout(Math.max(1, Math.ceil(request.timeout * 1000))),
    };
    if (request.json !== undefined) init.body = JSON.stringify(request.json);
    try {
      const response = await this.fetcher(url, init);
      return responseOf(response.status, response.headers.get("Retry-After"), await response.text());
    } catch (error) {
      const reason = error instanceof Error ? error.message || error.name : String(error);
      return { kind: "failure", reason };
    }
  }

  /**
   * Run the tool until it settles, its timeout passes or `signal` fires, heartbeating while it
   * runs. A tool that outlives its timeout is abandoned (its signal fired), never awaited.
   */
  private async execute(action: Execute, signal?: AbortSignal): Promise<Executed> {
    const own = new AbortController();
    const stop = new AbortController();
    if (action.heartbeatEvery !== null) void this.heartbeat(action, stop.signal);
    let timer: ReturnType<typeof setTimeout> | undefined;
    let onAbort: (() => void) | undefined;
    const interrupted = new Promise<Executed>((resolve) => {
      timer = setTimeout(() => resolve(executedAfter(new Error("timed out"))), action.timeout * 1000);
      onAbort = (): void => resolve(executedAfter(aborted(signal), true));
      if (signal?.aborted) onAbort();
      else signal?.addEventListener("abort", onAbort, { once: true });
    });
    const ran = (async (): Promise<Executed> => {
      try {
        const result = await action.execute(action.context, own.signal);
        return { kind: "executed", outcome: "succeeded", result, cancelled: false };
      } catch (error) {
        return executedAfter(error);
      }
    })();
    try {
      return await Promise.race([ran, interrupted]);
    } finally {
      clearTimeout(timer);
      if (onAbort) signal?.removeEventListener("abort", onAbort);
      stop.abort();
      own.abort(); // a tool still running is told it was abandoned
    }
  }

  private async heartbeat(action: Execute, stop: AbortSignal): Promise<void> {
    let every = action.heartbeatEvery;
    while (every !== null) {
      try {
        await sleep(every, stop);
      } catch {
        return;
      }
      const reply = await this.send(heartbeatRequest(action.context, this.protocol.requestTimeout));
      every = nextHeartbeat(reply, every);
    }
  }
}

/** `options` with the trace context: its own `traceparent`, else the active span's. */
async function traced<T extends CallOptions>(options: T): Promise<T> {
  const traceparent = options.traceparent ?? (await ambientTraceparent());
  return traceparent === undefined ? options : { ...options, traceparent };
}

/** The ledger's refusals of a call whose run has ended. */
const RUN_ENDED = new Set(["RUN_FINISHED", "RUN_HALTED"]);

/** A run of an agent: every call goes through `call`. */
export class Run {
  readonly runId: string;

  constructor(
    readonly client: LedgerClient,
    readonly data: RunOut,
  ) {
    this.runId = data.run_id;
  }

  call(
    tool: string,
    input: Body,
    execute: ToolFunction,
    options: CallOptions & Cancellable = {},
  ): Promise<Observation> {
    return this.client.call(this.runId, tool, input, execute, options);
  }

  /**
   * `call` as a framework's tool makes it: a refusal because the run has ended
   * (`RUN_FINISHED`, `RUN_HALTED`) is the model's news, an observation that nothing ran, not an
   * error a framework would hand the model as "fix your input".
   */
  async callForModel(
    tool: string,
    input: Body,
    execute: ToolFunction,
    options: CallOptions & Cancellable = {},
  ): Promise<Observation> {
    try {
      return await this.call(tool, input, execute, options);
    } catch (error) {
      if (error instanceof LedgerRequestError && RUN_ENDED.has(String(error.problem.code))) {
        return runEnded(error.problem);
      }
      throw error;
    }
  }

  finish(terminationReason: string): Promise<Body> {
    return this.client.finishRun(this.runId, terminationReason);
  }
}
