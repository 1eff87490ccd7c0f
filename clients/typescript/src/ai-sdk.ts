/**
 * The Vercel AI SDK (`ai`): tools whose `execute` goes through the ledger.
 *
 *     const result = await ledger.run({ userId: "u-42" }, (run) =>
 *       generateText({ model, tools: ledgerTools(run, { create_order }), prompt }),
 *     );
 *
 * Each call the model makes is recorded before it runs and executed only when the ledger says
 * so; the model gets the tool's own result, or the ledger's observation (a recorded result, an
 * uncertain outcome, a refusal) as the tool's result. The tool-call id names the ledger's step;
 * the action is keyed by the tool and its arguments, so a call the model plans again under a new
 * id is the same action and never runs twice. The SDK's abort signal cancels the call (reported
 * uncertain if the tool was running).
 *
 * Approvals: a tool's own `needsApproval` is kept, and both gates must pass (`approvals.ts`).
 * The SDK asks first: a call its person denies never reaches the ledger. A call the person
 * approved (a `tool-approval-response` in the messages) goes to the ledger; if a policy of the
 * ledger holds it, the approval is forwarded through `approver` (a client holding a person's
 * token with the approver role) and the call runs once. Without `approver`, for a tool without
 * a gate of its own, or for a replay the ledger asks about, a held call waits inside `execute`
 * for the ledger's approvers (the console or the approvals API) up to `approvalDeadline`. The
 * approval is read from the messages the SDK is given: pass `approver` only where those come
 * from the server's own state, not as a browser sent them.
 *
 * Nothing of `ai` is imported: the tools are wrapped by their shape.
 */

import { callWithApproval } from "./approvals.js";
import type { LedgerClient, Run } from "./client.js";
import { toolResult } from "./observations.js";
import type { Body, CallContext, CallOptions } from "./protocol.js";

/** What the SDK hands a tool's `execute` (the fields read here). */
export interface ToolExecutionOptions {
  toolCallId: string;
  abortSignal?: AbortSignal;
  messages?: unknown[];
}

export interface LedgerToolsOptions extends CallOptions {
  /** A person's client (approver role) through which the SDK's approvals reach the ledger. */
  approver?: LedgerClient;
  /** Seconds a call the SDK's person approved waits for the ledger to show it approved. */
  approvalWait?: number;
}

interface Part {
  type?: string;
  approvalId?: string;
  toolCallId?: string;
  approved?: boolean;
}

/** Whether the messages hold a person's approval of the tool call `toolCallId`. */
export function approvedInMessages(messages: unknown[] | undefined, toolCallId: string): boolean {
  const parts = (messages ?? []).flatMap((message) => {
    const content = (message as { content?: unknown }).content;
    return Array.isArray(content) ? (content as Part[]) : [];
  });
  const asked = new Set(
    parts
      .filter((part) => part.type === "tool-approval-request" && part.toolCallId === toolCallId)
      .map((part) => part.approvalId),
  );
  return parts.some(
    (part) =>
      part.type === "tool-approval-response" && part.approved === true && asked.has(part.approvalId),
  );
}

/**
 * An AI SDK tool, by the one field the wrapper replaces: its `execute` (typed loosely, as each
 * tool's input and output are its own).
 */
export interface AiSdkTool {
  execute?: (input: any, options: any) => unknown;
}

const CALL = Symbol("agent-ledger call");

/**
 * The ledger's call a wrapped tool's `execute` runs under (its idempotency key, to hand to the
 * downstream), from the options the tool was given; undefined outside the ledger.
 */
export function ledgerCallOf(options: object): CallContext | undefined {
  return (options as { [CALL]?: CallContext })[CALL];
}

/**
 * The tools with each `execute` going through the ledger in `run`; a tool without `execute`
 * (one the application runs itself) is kept as it is. `options` apply to every call.
 */
export function ledgerTools<T extends Record<string, AiSdkTool>>(
  run: Run,
  tools: T,
  options: LedgerToolsOptions = {},
): T {
  const { approver, approvalWait, ...callOptions } = options;
  const wrapped: Record<string, AiSdkTool> = {};
  for (const [name, tool] of Object.entries(tools)) {
    const execute = tool.execute;
    if (execute === undefined) {
      wrapped[name] = tool;
      continue;
    }
    wrapped[name] = {
      ...tool,
      execute: async (input: Body, sdk: ToolExecutionOptions): Promise<unknown> => {
        const observation = await callWithApproval(
          run,
          name,
          input,
          (context, signal) =>
            execute(input, { ...sdk, abortSignal: signal, [CALL]: context }),
          {
            ...callOptions,
            stepId: sdk.toolCallId,
            ...(sdk.abortSignal === undefined ? {} : { signal: sdk.abortSignal }),
          },
          {
            approvedHere: approvedInMessages(sdk.messages, sdk.toolCallId),
            ...(approver === undefined ? {} : { approver }),
            ...(approvalWait === undefined ? {} : { wait: approvalWait }),
          },
        );
        return toolResult(observation);
      },
    };
  }
  return wrapped as T;
}
