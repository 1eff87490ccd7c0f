/**
 * OpenAI Agents JS (`@openai/agents`): function tools whose `execute` goes through the ledger.
 *
 *     const createOrder = tool(ledgerTool(run, { name: "create_order", parameters, execute }));
 *
 * `ledgerTool` takes the options you would hand the SDK's `tool()` and returns them with
 * `execute` wrapped: each call is recorded before it runs and executed only when the ledger says
 * so, and the model gets the tool's own result or the ledger's observation. The SDK's tool-call
 * id names the ledger's step; the action is keyed by the tool and its arguments, so a call the
 * model plans again under a new id never runs twice. A tool's `needsApproval` is kept: the SDK
 * pauses for its approval first, then the ledger's approval policies may ask too, and both must
 * pass. The SDK's abort signal cancels the call.
 *
 * Nothing of the SDK is imported: the options are wrapped by their shape.
 */

import type { Run } from "./client.js";
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

const CALL = Symbol("agent-ledger call");

/** The ledger's call a wrapped tool runs under, from its details; undefined outside it. */
export function ledgerCallOf(details: object | undefined): CallContext | undefined {
  return (details as { [CALL]?: CallContext } | undefined)?.[CALL];
}

/** The tool's options with its `execute` going through the ledger in `run`. */
export function ledgerTool<T extends FunctionToolOptions>(
  run: Run,
  options: T,
  callOptions: CallOptions = {},
): T {
  const execute = options.execute;
  return {
    ...options,
    execute: async (input: Body, context?: unknown, details?: ToolCallDetails): Promise<unknown> => {
      const callId = details?.toolCall?.callId;
      const observation = await run.call(
        options.name,
        input,
        (call, signal) => execute(input, context, { ...details, signal, [CALL]: call }),
        {
          ...callOptions,
          ...(callId ? { stepId: callId } : {}),
          ...(details?.signal ? { signal: details.signal } : {}),
        },
      );
      return toolResult(observation);
    },
  };
}
