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
 * id is the same action and never runs twice. A tool's own `needsApproval` is kept: the SDK asks
 * first, then the ledger's approval policies may ask too, and both must pass. The SDK's abort
 * signal cancels the call (reported uncertain if the tool was running).
 *
 * Nothing of `ai` is imported: the tools are wrapped by their shape.
 */

import type { Run } from "./client.js";
import { toolResult } from "./observations.js";
import type { Body, CallContext, CallOptions } from "./protocol.js";

/** What the SDK hands a tool's `execute` (the fields read here). */
export interface ToolExecutionOptions {
  toolCallId: string;
  abortSignal?: AbortSignal;
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
  options: CallOptions = {},
): T {
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
        const observation = await run.call(
          name,
          input,
          (context, signal) =>
            execute(input, { ...sdk, abortSignal: signal, [CALL]: context }),
          {
            ...options,
            stepId: sdk.toolCallId,
            ...(sdk.abortSignal === undefined ? {} : { signal: sdk.abortSignal }),
          },
        );
        return toolResult(observation);
      },
    };
  }
  return wrapped as T;
}
