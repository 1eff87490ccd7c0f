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
 * decision is forwarded to the ledger. Rejected, the call never runs and the model hears the
 * reason; approved, it runs once the ledger's approval is given too (forwarded, or decided in
 * the console), waited for up to `approvalWait` seconds. The held observation is kept in this
 * object's memory until the thread is resumed, so the same process must resume it.
 *
 * `@langchain/core` and `@langchain/langgraph` are peer dependencies of this module only.
 */

import type { StructuredToolInterface } from "@langchain/core/tools";
import { tool } from "@langchain/core/tools";
import { ToolMessage } from "@langchain/core/messages";
import { interrupt } from "@langchain/langgraph";

import type { LedgerClient, Run } from "./client.js";
import { modelText, type Observation, rejectedInRuntime } from "./observations.js";
import type { Body, CallOptions } from "./protocol.js";

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

interface Configured {
  configurable?: { thread_id?: string };
  toolCall?: { id?: string; name: string; args: Record<string, unknown> };
  signal?: AbortSignal;
}

function threadOf(config: Configured | string): string {
  return typeof config === "string" ? config : (config.configurable?.thread_id ?? "default");
}

function isHeld(observation: Observation): boolean {
  return observation.code === "APPROVAL_REQUIRED" && observation.metadata.approval_id !== undefined;
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
      const execute = (_context: unknown, signal: AbortSignal): Promise<unknown> =>
        original.invoke(input, { ...config, signal } as never);
      const options: CallOptions & { signal?: AbortSignal } = {
        ...this.settings,
        ...(step ? { stepId: step } : {}),
        ...(config.signal ? { signal: config.signal } : {}),
        waitForApproval: false,
      };
      const key = `${thread}:${step}`;
      let held = this.held.get(key);
      if (held === undefined) {
        const observation = await run.call(original.name, input, execute, options);
        if (!isHeld(observation)) return message(original.name, step, observation);
        held = observation;
        this.held.set(key, held);
      }
      const resumed: unknown = interrupt({ ledger: held, tool_call: toolCall });
      this.held.delete(key);
      return message(original.name, step, await this.decided(held, resumed, original.name, input, execute));
    };
    return tool(call as never, {
      name: original.name,
      description: original.description,
      schema: original.schema as never,
    }) as unknown as StructuredToolInterface;
  }

  /** The observation for a held call once the graph is resumed with `resumed`. */
  private async decided(
    held: Observation,
    resumed: unknown,
    tool: string,
    input: Body,
    execute: (context: unknown, signal: AbortSignal) => Promise<unknown>,
  ): Promise<Observation> {
    const decision = decisionOf(resumed);
    const approvalId = Number(held.metadata.approval_id);
    const approver = this.settings.approver;
    if (decision !== null && approver !== undefined) {
      await approver.decideApproval(approvalId, decision.approve, decision.reason ?? "");
    } else if (decision !== null && !decision.approve) {
      return rejectedInRuntime(tool, decision.reason ?? "");
    }
    return this.ledger.resume(String(held.metadata.call_id), input, execute, {
      ...this.settings,
      approvalDeadline: this.settings.approvalWait ?? 30,
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
