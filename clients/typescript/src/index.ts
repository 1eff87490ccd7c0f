/**
 * Agent Ledger's TypeScript client: record every tool call before it runs, execute it only when
 * the ledger says so, and hand the model an observation it can act on.
 */

export {
  type CallOut,
  type Cancellable,
  type ClientSettings,
  LedgerClient,
  type RecordOut,
  Run,
  type RunOut,
} from "./client.js";
export { LedgerRequestError, LedgerUnavailableError, ToolError } from "./errors.js";
export { modelText, type Observation } from "./observations.js";
export type { components, paths } from "./openapi.js";
export {
  type Action,
  type CallContext,
  type CallOptions,
  type Flow,
  LedgerProtocol,
  type ProtocolSettings,
  type Reply,
  type ToolFunction,
} from "./protocol.js";
