/**
 * An MCP guard: Agent Ledger between a runtime and an MCP server, around the MCP TypeScript
 * SDK's `Client` (`@modelcontextprotocol/sdk`), with the Python guard's rules
 * (`agent_ledger_client.mcp_guard`).
 *
 *     const guard = new LedgerGuard(mcpClient, ledger, run, { server: "memory" });
 *     await guard.listTools(); // imported into the registry and re-classified
 *     const result = await guard.callTool("create_entities", args, { toolCallId: "t1" });
 *
 * `listTools` imports the server's tools into the ledger's registry, where they are
 * re-classified (an untrusted server's annotations can only make a tool more conservative).
 * `callTool` goes through the ledger: the action is identified by the tool and its arguments
 * (or its declared key fields), never by the JSON-RPC id, so a retry under a new request id, a
 * reconnect or a re-planned call is the same action. The idempotency key (and a `traceparent`,
 * given or the caller's active OpenTelemetry span's) goes to the server in the request's
 * `_meta`; the ledger's answer comes back in the result's `_meta` under `io.agentledger/ledger`.
 * `isError: true` is a failed call carrying its text; a timeout or a dead server is uncertain;
 * a refusal comes back as an error result whose text is the model-facing observation, so the
 * model never mistakes it for success. With `fileRoot`, a
 * file write under that root carries a write plan the guard computes (before hash, after hash,
 * diff; `file-writes.ts`), and a write whose outcome was lost settles by the file's hash:
 * already applied, applied again after approval, or a conflict.
 *
 * Nothing of the SDK is imported: the client is used by its shape.
 */

import type { LedgerClient, Run } from "./client.js";
import { ToolError } from "./errors.js";
import { FileWrites } from "./file-writes.js";
import type { Observation } from "./observations.js";
import { type Body, type CallOptions, DEFAULT_APPROVAL_DEADLINE } from "./protocol.js";
import { ambientTraceparent } from "./trace.js";

/** Where the ledger's answer goes in a result's `_meta`. */
export const LEDGER_META_KEY = "io.agentledger/ledger";
/** Where the idempotency key goes in a request's `_meta`. */
export const KEY_META_KEY = "io.agentledger/idempotency-key";

/** An MCP tool call's result, by the fields read here. */
export interface CallToolResult {
  content: unknown[];
  isError?: boolean;
  structuredContent?: unknown;
  _meta?: Record<string, unknown>;
  [field: string]: unknown;
}

/** The MCP SDK's `Client`, by the methods the guard calls. */
export interface McpClient {
  listTools(): Promise<{ tools: unknown[] }>;
  callTool(
    params: { name: string; arguments?: Record<string, unknown>; _meta?: Record<string, unknown> },
    resultSchema?: undefined,
    options?: { timeout?: number; signal?: AbortSignal },
  ): Promise<unknown>;
  getServerVersion(): { name: string } | undefined;
}

export interface GuardSettings {
  /** The server's name in the ledger (its tools are `<server>/<tool>`). */
  server: string;
  trust?: "trusted" | "untrusted";
  waitForApproval?: boolean;
  approvalDeadline?: number;
  /** Seconds a tool call may take on the server. */
  toolTimeout?: number;
  /** What identifies some tools' business action, by tool name: `{ create_issue: ["title"] }`. */
  keyFields?: Record<string, string[]>;
  /** The folder the server's file writes lie under: they carry write plans (`file-writes.ts`). */
  fileRoot?: string;
}

/** The ledger's answer as it goes into a result's `_meta`. */
export function ledgerMeta(observation: Observation): Body {
  const answer: Body = { ok: Boolean(observation.ok), code: observation.code ?? null };
  for (const name of ["call_id", "idempotency_key", "replayed", "next_action", "recorded"]) {
    if (name in observation.metadata) answer[name] = observation.metadata[name];
  }
  return answer;
}

/**
 * The MCP result for an observation: the server's own result when the call succeeded, else a
 * result whose text is the observation (an error unless it is a success the ledger answered,
 * such as `ALREADY_APPLIED`); the ledger's answer in `_meta`.
 */
export function resultOf(observation: Observation): CallToolResult {
  const meta = { [LEDGER_META_KEY]: ledgerMeta(observation) };
  const content = observation.content;
  if (observation.ok && typeof content === "object" && content !== null && "content" in content) {
    const result = content as CallToolResult;
    return { ...result, _meta: { ...(result._meta ?? {}), ...meta } };
  }
  return {
    content: [{ type: "text", text: JSON.stringify(observation) }],
    isError: !observation.ok,
    _meta: meta,
  };
}

/** An uncertain write the ledger settles by asking (its replay policy): its outcome was lost. */
function lost(observation: Observation): boolean {
  return (
    observation.code === "SIDE_EFFECT_UNCERTAIN" &&
    observation.metadata.replay_policy === "ask" &&
    Boolean(observation.metadata.call_id)
  );
}

function textOf(result: CallToolResult): string {
  const parts = result.content.map((part) =>
    typeof part === "object" && part !== null && "text" in part ? String(part.text) : "",
  );
  return parts.filter(Boolean).join(" ") || "the tool reported an error";
}

/** An MCP client whose tool calls go through the ledger, in one run. */
export class LedgerGuard {
  private readonly settings: Required<Omit<GuardSettings, "toolTimeout" | "fileRoot">> & {
    toolTimeout?: number;
  };
  private readonly files: FileWrites | undefined;

  constructor(
    readonly client: McpClient,
    readonly ledger: LedgerClient,
    readonly run: Run,
    settings: GuardSettings,
  ) {
    const { fileRoot, ...rest } = settings;
    this.settings = {
      trust: "untrusted",
      waitForApproval: true,
      approvalDeadline: DEFAULT_APPROVAL_DEADLINE,
      keyFields: {},
      ...rest,
    };
    this.files = fileRoot === undefined ? undefined : new FileWrites(fileRoot);
  }

  /** The server's tools, after importing them into the ledger's registry. */
  async listTools(): Promise<{ tools: unknown[] }> {
    const listing = await this.client.listTools();
    const implementation = this.client.getServerVersion()?.name;
    await this.ledger.importMcpTools(
      this.settings.server,
      this.settings.trust,
      { tools: listing.tools },
      { keyFields: this.settings.keyFields, ...(implementation ? { implementation } : {}) },
    );
    return listing;
  }

  /**
   * Call `name` on the server through the ledger; `toolCallId` names the ledger's step (the
   * action is the ledger's to identify), `traceparent` goes to the ledger and to the server.
   */
  async callTool(
    name: string,
    args: Body = {},
    options: CallOptions & { toolCallId?: string; signal?: AbortSignal } = {},
  ): Promise<CallToolResult> {
    const { toolCallId, ...given } = options;
    // The trace context goes to the ledger and to the server: given, or the active span's.
    const traceparent = given.traceparent ?? (await ambientTraceparent());
    const call = traceparent === undefined ? given : { ...given, traceparent };
    const toolTimeout = this.settings.toolTimeout;
    let plan: Body | undefined;
    let refused: unknown;
    if (this.files !== undefined && name in this.files.tools) {
      try {
        plan = this.files.plan(this.settings.server, name, args);
      } catch (error) {
        refused = error;
      }
    }
    const execute = async (context: { idempotencyKey: string }, signal: AbortSignal) => {
      // The guard's own check, before anything reached the server: a failure with no effect.
      if (refused !== undefined) throw refused;
      const meta: Body = { [KEY_META_KEY]: context.idempotencyKey };
      if (call.traceparent) meta.traceparent = call.traceparent;
      const result = (await this.client.callTool(
        { name, arguments: args, _meta: meta },
        undefined,
        toolTimeout === undefined ? { signal } : { signal, timeout: toolTimeout * 1000 },
      )) as CallToolResult;
      if (result.isError) {
        throw new ToolError(textOf(result).slice(0, 4000), { code: "MCP_TOOL_ERROR" });
      }
      return result;
    };
    const settings: CallOptions & { signal?: AbortSignal } = {
      waitForApproval: this.settings.waitForApproval,
      approvalDeadline: this.settings.approvalDeadline,
      ...call,
    };
    if (toolCallId) settings.stepId = toolCallId;
    if (plan !== undefined) settings.writePlan = plan;
    if (toolTimeout !== undefined && settings.timeout === undefined) {
      settings.timeout = toolTimeout + 1;
    }
    let observation = await this.run.callForModel(
      `${this.settings.server}/${name}`,
      args,
      execute,
      settings,
    );
    if (this.files !== undefined && plan !== undefined && lost(observation)) {
      // A write whose outcome was lost, settled by the file's hash now.
      // With the call's own settings: its signal, its tool timeout, its trace.
      const { stepId: _step, writePlan: _plan, ...again } = settings;
      observation = await this.ledger.replay(String(observation.metadata.call_id), args, execute, {
        ...again,
        currentHash: this.files.currentHash(this.files.target(args)),
      });
    }
    return resultOf(observation);
  }
}
