/**
 * LangGraph.js: every tool call of a `ToolNode` goes through the ledger.
 *
 *     const calls = new LedgerToolCalls(ledger, { userId: "user-7" });
 *     const tools = new ToolNode(calls.wrap([createOrder]));
 *     ...
 *     await graph.invoke(state, config); // config names the thread
 *     await calls.finish(config);         // the thread's ledger run ends
 *
 * A graph thread is one ledger run (started at its first tool call, finished by `finish`); the
 * model's tool-call id is the step id. A call the model plans again (a new tool-call id, the same
 * arguments) is the same action: it gets the recorded result, or `SIDE_EFFECT_UNCERTAIN`. The
 * model gets the ledger's observation as the tool message (status `error` unless it succeeded),
 * never "please fix your input" for a lost response.
 *
 * Approvals: a call the ledger holds for a human becomes LangGraph's `interrupt()` with
 * `{ ledger: observation, tool_call }` (the observation carries `metadata.approval_id` and the
 * policy's reason). Resume the graph with `new Command({ resume: { approve: true } })`, or
 * `{ approve: false, reason }`: with an `approver` client (a person with the approver role) the
 * decision is forwarded to the ledger. Rejected, the call never runs (even if the ledger's
 * approvers had approved it) and the model hears the reason; approved, it runs once the
 * ledger's approval is given too (forwarded, or decided in the console), waited for up to
 * `approvalWait` seconds. When one step holds several calls, name each decision's
 * `approval_id` (LangGraph hands resume values out by the order of the interrupts): a decision
 * naming another call's approval is refused, and nothing runs. The held call is kept in the
 * graph's store (`graph.compile({ store })`) until the thread is resumed, so another process,
 * with the same checkpointer and store, may resume it; without a store it is kept in this
 * object's memory, and the same process must resume it.
 *
 * `ledgerCallOf(config)` gives a wrapped tool its ledger call (its idempotency key, to hand the
 * downstream), from the config the tool is invoked with.
 *
 * `@langchain/core` and `@langchain/langgraph` are peer dependencies of this module only.
 */

import type { StructuredToolInterface } from "@langchain/core/tools";
import { tool } from "@langchain/core/tools";
import { ToolMessage } from "@langchain/core/messages";
import { interrupt } from "@langchain/langgraph";

import { forward, isHeld, rejected, resumed } from "./approvals.js";
import type { LedgerClient, Run } from "./client.js";
import { modelText, type Observation, startRefused } from "./observations.js";
import type { Body, CallContext, CallOptions } from "./protocol.js";

/** What the graph is resumed with for a held call. */
export interface Decision {
  approve: boolean;
  reason?: string;
}

export interface ToolCallsSettings extends CallOptions {
  userId: string;
  /** A person's client (approver role) through which a resume's decision reaches the ledger. */
  approver?: LedgerClient;
  /** Seconds a resumed call waits for the ledger to show the approval. */
  approvalWait?: number;
}

/** The graph's store, by the methods read here (LangGraph's `BaseStore`). */
interface Store {
  get(namespace: string[], key: string): Promise<{ value: Record<string, unknown> } | null>;
  put(namespace: string[], key: string, value: Record<string, unknown>): Promise<void>;
  delete(namespace: string[], key: string): Promise<void>;
}

interface Configured {
  configurable?: { thread_id?: string; [LEDGER_CALL]?: CallContext };
  toolCall?: { id?: string; name: string; args: Record<string, unknown> };
  signal?: AbortSignal;
  store?: Store;
}

/** Where a wrapped tool's config carries its ledger call. */
const LEDGER_CALL = "agent_ledger_call";
/** The store namespace of the calls held for a human. */
export const HELD = ["agent_ledger", "held"];

/** The ledger's call a wrapped tool runs under, from its config; undefined outside it. */
export function ledgerCallOf(config: object | undefined): CallContext | undefined {
  return (config as Configured | undefined)?.configurable?.[LEDGER_CALL];
}

/** The thread's calls held for a human: in the graph's store when it has one, else in memory. */
class Held {
  constructor(
    private readonly store: Store | undefined,
    private readonly memory: Map<string, Observation>,
  ) {}

  async get(key: string): Promise<Observation | undefined> {
    if (this.store === undefined) return this.memory.get(key);
    const item = await this.store.get(HELD, key);
    return item === null ? undefined : (item.value as unknown as Observation);
  }

  async put(key: string, held: Observation): Promise<void> {
    if (this.store === undefined) this.memory.set(key, held);
    else await this.store.put(HELD, key, held as unknown as Record<string, unknown>);
  }

  async delete(key: string): Promise<void> {
    if (this.store === undefined) this.memory.delete(key);
    else await this.store.delete(HELD, key);
  }
}

function threadOf(config: Configured | string): string {
  return typeof config === "string" ? config : (config.configurable?.thread_id ?? "default");
}

function decisionOf(resumed: unknown): Decision | null {
  if (typeof resumed !== "object" || resumed === null || !("approve" in resumed)) return null;
  const { approve, reason } = resumed as { approve: unknown; reason?: unknown };
  return { approve: approve === true, reason: typeof reason === "string" ? reason : "" };
}

/** The tool calls of a graph's `ToolNode`, through the ledger. */
export class LedgerToolCalls {
  private readonly runs = new Map<string, Promise<Run>>();
  private readonly held = new Map<string, Observation>();
  private readonly settings: ToolCallsSettings;

  constructor(
    readonly ledger: LedgerClient,
    settings: ToolCallsSettings,
  ) {
    this.settings = settings;
  }

  /** The thread's ledger run, started once (starting is idempotent by run id). */
  runFor(thread: string): Promise<Run> {
    let run = this.runs.get(thread);
    if (run === undefined) {
      run = this.ledger.startRun({ userId: this.settings.userId, runId: thread });
      this.runs.set(thread, run);
    }
    return run;
  }

  /** End the thread's ledger run (when its graph run is over). */
  async finish(config: Configured | string, terminationReason = "completed"): Promise<void> {
    const thread = threadOf(config);
    const run = await this.runFor(thread);
    this.runs.delete(thread);
    await run.finish(terminationReason);
  }

  /** The tools, each call of each going through the ledger. */
  wrap(tools: StructuredToolInterface[]): StructuredToolInterface[] {
    return tools.map((original) => this.wrapOne(original));
  }

  private wrapOne(original: StructuredToolInterface): StructuredToolInterface {
    const call = async (input: Body, config: Configured): Promise<ToolMessage> => {
      const toolCall = config.toolCall;
      const thread = threadOf(config);
      const run = await this.runFor(thread);
      const step = toolCall?.id ?? "";
      // The tool is invoked without the tool call, so it returns its own result (not a
      // ToolMessage): that is what the ledger records and the model is handed.
      const { toolCall: _asked, ...own } = config;
      const execute = (context: CallContext, signal: AbortSignal): Promise<unknown> =>
        original.invoke(input, {
          ...own,
          configurable: { ...config.configurable, [LEDGER_CALL]: context },
          signal,
        } as never);
      const options: CallOptions & { signal?: AbortSignal } = {
        ...this.settings,
        ...(step ? { stepId: step } : {}),
        ...(config.signal ? { signal: config.signal } : {}),
        waitForApproval: false,
      };
      const key = `${thread}/${step}`;
      const journal = new Held(config.store, this.held);
      let held = await journal.get(key);
      if (held === undefined) {
        const observation = await run.callForModel(original.name, input, execute, options);
        if (!isHeld(observation)) return message(original.name, step, observation);
        held = observation;
        await journal.put(key, held);
      }
      const resumed: unknown = interrupt({ ledger: held, tool_call: toolCall });
      const observation = await this.decided(held, resumed, original.name, input, execute);
      await journal.delete(key);
      return message(original.name, step, observation);
    };
    return tool(call as never, {
      name: original.name,
      description: original.description,
      schema: original.schema as never,
    }) as unknown as StructuredToolInterface;
  }

  /** The observation for a held call once the graph is resumed with `answer`. */
  private async decided(
    held: Observation,
    answer: unknown,
    tool: string,
    input: Body,
    execute: (context: CallContext, signal: AbortSignal) => Promise<unknown>,
  ): Promise<Observation> {
    const named = (answer as { approval_id?: unknown } | null)?.approval_id;
    if (named !== undefined && Number(named) !== Number(held.metadata.approval_id)) {
      const detail = `the decision was given for approval ${String(named)}, not this call's`;
      return startRefused(tool, { code: "IDEMPOTENCY_KEY_CONFLICT", detail });
    }
    const decision = decisionOf(answer);
    const { userId: _user, approver, approvalWait, ...options } = this.settings;
    if (decision !== null && !decision.approve) {
      return rejected(this.ledger, held, tool, decision.reason ?? "", approver);
    }
    if (decision !== null) await forward(approver, held, true);
    return resumed(this.ledger, held, input, execute, {
      ...options,
      ...(approvalWait === undefined ? {} : { wait: approvalWait }),
    });
  }
}

function message(name: string, toolCallId: string, observation: Observation): ToolMessage {
  return new ToolMessage({
    content: modelText(observation),
    tool_call_id: toolCallId,
    name,
    status: observation.ok ? "success" : "error",
    artifact: observation,
  });
}
