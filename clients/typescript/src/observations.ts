/** The observations the client writes itself, when the ledger cannot write them. */

/** What the model is told about a call: the ledger's observation, or one of these. */
export interface Observation {
  ok: boolean;
  code?: string;
  content: unknown;
  metadata: Record<string, unknown>;
}

function refused(code: string, content: string, metadata: Record<string, unknown>): Observation {
  return {
    ok: false,
    code,
    content,
    metadata: { recorded: false, replayed: false, retryable: false, ...metadata },
  };
}

/**
 * Every observation says whether it was answered from the record (`metadata.replayed`), so
 * `observation.metadata.replayed` holds for every decision.
 */
export function normalised(observation: unknown): Observation {
  const found = (observation ?? {}) as Observation;
  const metadata = { replayed: false, ...(found.metadata ?? {}) };
  return { ...found, metadata };
}

/** The ledger cannot be reached: fail closed, unless the tool is read-only and ran. */
export function unavailable(
  tool: string,
  reason: string,
  ran?: { result: unknown },
): Observation {
  if (ran !== undefined) {
    return {
      ok: true,
      content: ran.result,
      metadata: { recorded: false, replayed: false, next_action: "none" },
    };
  }
  return {
    ok: false,
    code: "LEDGER_UNAVAILABLE",
    content:
      `${tool} was NOT executed: the ledger is unreachable (${reason}) and ${tool} is not ` +
      "known to be read-only. Try again later or ask the user.",
    metadata: { retryable: true, recorded: false, replayed: false, next_action: "retry_later" },
  };
}

/**
 * The outcome could not be reported within the lease: the ledger will treat the call as unknown,
 * so the model hears the same.
 */
export function unreported(
  tool: string,
  outcome: string,
  callId: string,
  idempotencyKey: string,
): Observation {
  const ran =
    outcome === "succeeded"
      ? `${tool} reported success, but the ledger could not record it.`
      : outcome === "failed"
        ? `${tool} reported a failure, but the ledger could not record it.`
        : `${tool} was started and its outcome is unknown.`;
  return refused(
    "SIDE_EFFECT_UNCERTAIN",
    `${ran} It may have taken effect; do not retry it. Look it up by idempotency key or ask ` +
      "the user.",
    { call_id: callId, idempotency_key: idempotencyKey, next_action: "lookup" },
  );
}

/**
 * The ledger answered as if this runtime had never run the action, though it had: the ledger
 * lost its record (a failover to a standby that lacked it). Not run again.
 */
export function forgotten(tool: string, callId: string, idempotencyKey: string): Observation {
  return refused(
    "SIDE_EFFECT_UNCERTAIN",
    `${tool} was already run by this runtime under this idempotency key, and the ledger has ` +
      "lost its record of it, so it was NOT run again. It may have taken effect; do not retry " +
      "it. Look it up by idempotency key or ask the user.",
    { call_id: callId, idempotency_key: idempotencyKey, next_action: "lookup" },
  );
}

/**
 * The ledger refused to start an approved call: its input is not the approved action's, or the
 * approval cannot be used. Nothing ran.
 */
export function startRefused(tool: string, problem: Record<string, unknown>): Observation {
  const code = String(problem.code ?? "HTTP_ERROR");
  return refused(
    code,
    `${tool} was NOT executed: ${String(problem.detail ?? code)}. An approval holds for the ` +
      "exact action it was given for; do not retry with other arguments, ask the user.",
    { next_action: "stop" },
  );
}

/** A person rejected the call in the agent framework's own approval flow: it was not run. */
export function rejectedInRuntime(tool: string, reason: string): Observation {
  return refused(
    "APPROVAL_REJECTED",
    `A human rejected running ${tool}. It was NOT executed. Reason given: ` +
      (reason || "no reason given"),
    { next_action: "stop" },
  );
}

/**
 * The ledger refused a call because its run has ended (`RUN_FINISHED`, `RUN_HALTED`): the model
 * hears the ledger's reason, and that nothing ran.
 */
export function runEnded(problem: Record<string, unknown>): Observation {
  const code = String(problem.code);
  return refused(
    code,
    `Nothing was executed: ${String(problem.detail ?? code)}. This run takes no more actions; ` +
      "stop and tell the user (a new task needs a new run).",
    { next_action: "stop" },
  );
}

/**
 * What a framework's tool returns to the model: a success's own result (the object the tool
 * returned), else the whole observation, which cannot be mistaken for success.
 */
export function toolResult(observation: Observation): unknown {
  return observation.ok && observation.code === undefined ? observation.content : observation;
}

/**
 * What a framework hands the model as text: a success's own result (text as is, anything else as JSON),
 * else the whole observation as JSON, which cannot be mistaken for success.
 */
export function modelText(observation: Observation): string {
  if (observation.ok && observation.code === undefined) {
    const content = observation.content;
    return typeof content === "string" ? content : JSON.stringify(content);
  }
  return JSON.stringify(observation);
}
