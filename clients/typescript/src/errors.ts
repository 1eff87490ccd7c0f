/** What the client raises, and what a tool throws to say it failed for certain. */

/** The ledger refused a request (4xx): the body is its problem document. */
export class LedgerRequestError extends Error {
  readonly status: number;
  readonly problem: Record<string, unknown>;

  constructor(status: number, problem: Record<string, unknown>) {
    super(`HTTP ${status} ${String(problem.code ?? "")}: ${String(problem.detail ?? "")}`.trim());
    this.name = "LedgerRequestError";
    this.status = status;
    this.problem = problem;
  }
}

/** The ledger could not be reached, or answered 5xx, for as long as the client's budget lasts. */
export class LedgerUnavailableError extends Error {
  constructor(reason: string) {
    super(`the ledger is unavailable: ${reason}`);
    this.name = "LedgerUnavailableError";
  }
}

/**
 * Thrown by a tool to say it failed and nothing took effect: the outcome is `failed`, not
 * uncertain. Any other error (a timeout, a lost connection) may have happened after the effect,
 * so the client reports it uncertain.
 */
export class ToolError extends Error {
  readonly code: string;
  readonly retryable: boolean;

  constructor(message: string, options: { code?: string; retryable?: boolean } = {}) {
    super(message);
    this.name = "ToolError";
    this.code = options.code ?? "TOOL_ERROR";
    this.retryable = options.retryable ?? false;
  }
}
