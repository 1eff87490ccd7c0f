/**
 * OpenAI Agents JS (`@openai/agents`): function tools whose `execute` goes through the ledger.
 *
 *     const createOrder = tool(ledgerTool(run, { name: "create_order", parameters, execute }));
 *
 * `ledgerTool` takes the options you would hand the SDK's `tool()` and returns them with
 * `execute` wrapped: each call is recorded before it runs and executed only when the ledger says
 * so, and the model gets the tool's own result or the ledger's observation. The SDK's tool-call
 * id names the ledger's step; the action is keyed by the tool and its arguments, so a call the
 * model plans again under a new id never runs twice. The SDK's abort signal cancels the call.
 *
 * Approvals: a tool's `needsApproval` is kept, and both gates must pass (`approvals.ts`). The
 * SDK pauses for its approval first: a call its person rejects (`state.reject`) never reaches
 * the ledger. A call the person approved for this call id (`state.approve`) goes to the ledger;
 * if a policy of the ledger holds it, the approval is forwarded through `approver` (a client
 * holding a person's token with the approver role) and the call runs once. An "always approve"
 * is not forwarded: it approved no particular action. Without a forwarded approval, a held call
 * waits inside the tool for the ledger's approvers up to `approvalDeadline`.
 *
 * Nothing of the SDK is imported: the options are wrapped by their shape.
 */

import { callWithApproval } from "./approvals.js";
import type { LedgerClient, Run } from "./client.js";
import { toolResult } from "./observations.js";
import type { Body, CallContext, CallOptions } from "./protocol.js";

/** What the SDK hands a tool's `execute` as its third argument (the fields read here). */
export interface ToolCallDetails {
  toolCall?: { callId: string };
  signal?: AbortSignal;
}

/** The options of the SDK's `tool()`, by the fields the wrapper reads. */
export interface FunctionToolOptions {
  name: string;
  execute: (input: any, context?: any, details?: any) => unknown;
}

export interface LedgerToolOptions extends CallOptions {
  /** A person's client (approver role) through which the SDK's approvals reach the ledger. */
  approver?: LedgerClient;
  /** Seconds a call the SDK's person approved waits for the ledger to show it approved. */
  approvalWait?: number;
}

/** The SDK's run context, by what is read here: its record of the people's approvals. */
interface Approvals {
  toJSON?: () => { approvals?: Record<string, { approved?: boolean | string[] }> };
}

/**
 * Whether a person approved the call `callId` of `tool` in the SDK (`state.approve(item)`): an
 * approval of that call, not an "always approve" of the tool.
 */
export function approvedInContext(context: unknown, tool: string, callId: string): boolean {
  const record = (context as Approvals | undefined)?.toJSON?.().approvals?.[tool];
  return Array.isArray(record?.approved) && record.approved.includes(callId);
}

const CALL = Symbol("agent-ledger call");

/** The ledger's call a wrapped tool runs under, from its details; undefined outside it. */
export function ledgerCallOf(details: object | undefined): CallContext | undefined {
  return (details as { [CALL]?: CallContext } | undefined)?.[CALL];
}

/** The tool's options with its `execute` going through the ledger in `run`. */
export function ledgerTool<T extends FunctionToolOptions>(
  run: Run,
  options: T,
  ledgerOptions: LedgerToolOptions = {},
): T {
  const execute = options.execute;
  const { approver, approvalWait, ...callOptions } = ledgerOptions;
  return {
    ...options,
    execute: async (input: Body, context?: unknown, details?: ToolCallDetails): Promise<unknown> => {
      const callId = details?.toolCall?.callId;
      const observation = await callWithApproval(
        run,
        options.name,
        input,
        (call, signal) => execute(input, context, { ...details, signal, [CALL]: call }),
        {
          ...callOptions,
          ...(callId ? { stepId: callId } : {}),
          ...(details?.signal ? { signal: details.signal } : {}),
        },
        {
          approvedHere: callId !== undefined && approvedInContext(context, options.name, callId),
          ...(approver === undefined ? {} : { approver }),
          ...(approvalWait === undefined ? {} : { wait: approvalWait }),
        },
      );
      return toolResult(observation);
    },
  };
}
