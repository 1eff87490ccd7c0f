/**
 * What the framework adapters share about approvals: the framework's own gate and the ledger's.
 *
 * A tool may have its own gate (the AI SDK's and the Agents SDK's `needsApproval`, LangGraph's
 * `interrupt()`); the ledger's approval policies may hold the same call for a human
 * (`APPROVAL_REQUIRED`). Both must pass. The framework's gate comes first: a call its person
 * rejects never reaches the ledger and never runs. A call its person approves goes to the
 * ledger, and one the ledger holds runs once the ledger's approval is given too: forwarded
 * through an *approver* client (a `LedgerClient` holding a person's token with the approver
 * role, none of the action's principals: the ledger refuses those) when the framework's person
 * approved it, else decided in the console or the approvals API, waited for up to `wait`
 * seconds. The resumed call is started with its own input (another input than the approved
 * action's is refused by the ledger: nothing runs).
 */

import type { LedgerClient, Run } from "./client.js";
import { LedgerRequestError } from "./errors.js";
import { normalised, type Observation, rejectedInRuntime } from "./observations.js";
import type { Body, CallOptions, ToolFunction } from "./protocol.js";

/** Seconds a held call waits for the ledger's approval when nothing else is said. */
export const DEFAULT_APPROVAL_WAIT = 30;

/** Whether the ledger holds the call for a human (its observation says how to resume). */
export function isHeld(observation: Observation): boolean {
  return (
    observation.code === "APPROVAL_REQUIRED" &&
    observation.metadata.approval_id !== undefined &&
    observation.metadata.call_id !== undefined
  );
}

/**
 * Whether an approval policy holds the call before its first run (`metadata.approval_policy`):
 * the only hold a framework's approval of a new tool call may decide. A replay the ledger asks
 * about (an outcome that was lost) is a person's to decide on what the ledger shows.
 */
export function isPolicyHold(observation: Observation): boolean {
  return isHeld(observation) && observation.metadata.approval_policy !== undefined;
}

/**
 * Decide the held call's approval in the ledger as the framework's person did, through
 * `approver` (nothing without one). An approval the ledger has already decided, or that
 * expired (409), is left as the ledger has it.
 */
export async function forward(
  approver: LedgerClient | undefined,
  held: Observation,
  approve: boolean,
  reason = "",
): Promise<void> {
  if (approver === undefined) return;
  const text = reason || (approve ? "approved in the agent's UI" : "");
  try {
    await approver.decideApproval(Number(held.metadata.approval_id), approve, text);
  } catch (error) {
    if (!(error instanceof LedgerRequestError) || error.status !== 409) throw error;
  }
}

/**
 * The observation for a held call once it may go on: it runs when the ledger shows it
 * approved (waiting up to `wait` seconds), started with `input`; a rejection comes back as the
 * ledger's `APPROVAL_REJECTED` with the approver's reason.
 */
export function resumed(
  ledger: LedgerClient,
  held: Observation,
  input: Body,
  execute: ToolFunction,
  options: CallOptions & { signal?: AbortSignal; wait?: number } = {},
): Promise<Observation> {
  const { wait, ...call } = options;
  return ledger.resume(String(held.metadata.call_id), input, execute, {
    ...call,
    approvalDeadline: wait ?? DEFAULT_APPROVAL_WAIT,
  });
}

/**
 * The observation for a held call a person rejected in the framework, which never runs: the
 * ledger's rejection (with the reason) once `approver` has made it, else one that says the
 * framework's person rejected it. An approval the ledger had already given stays given, and
 * the call still does not run.
 */
export async function rejected(
  ledger: LedgerClient,
  held: Observation,
  tool: string,
  reason: string,
  approver: LedgerClient | undefined,
): Promise<Observation> {
  await forward(approver, held, false, reason);
  const latest = await ledger.getCall(String(held.metadata.call_id));
  if (latest.approval_state === "rejected") return normalised(latest.observation);
  return rejectedInRuntime(tool, reason);
}

/**
 * `run.callForModel`, for a call whose framework gate a person has (`approvedHere`) or has not
 * approved: with an approver client and that approval, an approval policy's hold is decided as
 * the person decided it and the call runs once; any other hold, or without both, the call
 * waits for the ledger's approvers as `options` say.
 */
export async function callWithApproval(
  run: Run,
  tool: string,
  input: Body,
  execute: ToolFunction,
  options: CallOptions & { signal?: AbortSignal },
  gate: { approvedHere: boolean; approver?: LedgerClient; wait?: number },
): Promise<Observation> {
  const { approver } = gate;
  if (!gate.approvedHere || approver === undefined) {
    return run.callForModel(tool, input, execute, options);
  }
  const observation = await run.callForModel(tool, input, execute, {
    ...options,
    waitForApproval: false,
  });
  if (!isHeld(observation)) return observation;
  if (isPolicyHold(observation)) await forward(approver, observation, true);
  return resumed(run.client, observation, input, execute, {
    ...options,
    ...(gate.wait === undefined ? {} : { wait: gate.wait }),
  });
}
