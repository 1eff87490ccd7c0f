/**
 * The MCP guard around the MCP TypeScript SDK's own `Client`, in front of the official memory
 * server (`@modelcontextprotocol/server-memory`, from npm) behind the tests' fault shim
 * (`tests/client/mcp_shim.py`, which drops a response after the server acted and logs every
 * call it forwards). `tests/client/test_typescript_client.py` names the shim's command line, its
 * faults file and its log in MCP_COMMAND, MCP_FAULTS and MCP_LOG. The effect is counted in the
 * server's own graph and in the calls that reached it.
 */

import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

import { LedgerClient } from "../src/client.js";
import { type CallToolResult, LEDGER_META_KEY, LedgerGuard, KEY_META_KEY } from "../src/mcp.js";
import { approvalDetail, approvalsWhere, decideFirst } from "./people.js";

const ledgerUrl = process.env.LEDGER_URL ?? "";
const token = process.env.LEDGER_TOKEN ?? "";
const command = JSON.parse(process.env.MCP_COMMAND ?? "[]") as string[];
const faults = process.env.MCP_FAULTS ?? "";
const log = process.env.MCP_LOG ?? "";
const skip = ledgerUrl === "" || command.length === 0 ? "no ledger or MCP server named" : false;
const approver = (process.env.APPROVER_TOKEN ?? "") === "" ? "APPROVER_TOKEN names no approver" : skip;

/** The `tools/call` requests of `tool` that reached the server. */
function callsOf(tool: string): { name: string; _meta?: Record<string, unknown> }[] {
  return readFileSync(log, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { name: string; _meta?: Record<string, unknown> })
    .filter((call) => call.name === tool);
}

function observationOf(result: CallToolResult): { code?: string; content?: unknown } {
  const [part] = result.content as { text: string }[];
  return JSON.parse(part?.text ?? "{}") as { code?: string; content?: unknown };
}

/** The names of the entities in the server's own graph. */
async function entitiesOf(guard: LedgerGuard): Promise<string[]> {
  const graph = await guard.callTool("read_graph", {});
  return (graph.structuredContent as { entities: { name: string }[] }).entities.map((e) => e.name);
}

function entity(name: string): Record<string, unknown> {
  return { entities: [{ name, entityType: "person", observations: ["x"] }] };
}

async function connected(line: string[] = command): Promise<Client> {
  const [program, ...args] = line;
  const client = new Client({ name: "agent-ledger-ts-test", version: "1.0.0" });
  await client.connect(new StdioClientTransport({ command: program ?? "", args }));
  return client;
}

test("a lost memory write, re-planned under a new tool-call id, reaches the server once", { skip }, async () => {
  const mcp = await connected();
  try {
    const ledger = new LedgerClient(ledgerUrl, token);
    const entity = { entities: [{ name: "Ada", entityType: "person", observations: ["x"] }] };
    const [first, again, graph] = await ledger.run({ userId: "u-mcp" }, async (run) => {
      const guard = new LedgerGuard(mcp, ledger, run, { server: "memory", toolTimeout: 3 });
      await guard.listTools();
      writeFileSync(faults, JSON.stringify({ tool: "create_entities", mode: "drop_response" }));
      return [
        await guard.callTool("create_entities", entity, { toolCallId: "tc-1" }),
        // The model plans it again: a new tool-call id and a new JSON-RPC request, the same
        // arguments.
        await guard.callTool("create_entities", entity, { toolCallId: "tc-2" }),
        await guard.callTool("read_graph", {}),
      ];
    });
    for (const result of [first, again]) {
      assert.equal(result?.isError, true);
      assert.equal(observationOf(result as CallToolResult).code, "SIDE_EFFECT_UNCERTAIN");
    }
    const reached = callsOf("create_entities");
    assert.equal(reached.length, 1);
    assert.ok(String(reached[0]?._meta?.[KEY_META_KEY] ?? "").length > 0, "the key goes in _meta");
    const entities = (graph?.structuredContent as { entities: { name: string }[] }).entities;
    assert.deepEqual(
      entities.map((e) => e.name),
      ["Ada"],
    );
    assert.equal((graph?._meta?.[LEDGER_META_KEY] as { ok: boolean }).ok, true);
  } finally {
    await mcp.close();
  }
});

test("a lost memory write re-sent under its own tool-call id after a reconnect reaches the server once", { skip }, async () => {
  const ledger = new LedgerClient(ledgerUrl, token);
  const [first, again] = await ledger.run({ userId: "u-mcp" }, async (run) => {
    const before = await connected();
    let lost: CallToolResult;
    try {
      const guard = new LedgerGuard(before, ledger, run, { server: "memory", toolTimeout: 3 });
      await guard.listTools();
      writeFileSync(faults, JSON.stringify({ tool: "create_entities", mode: "drop_response" }));
      lost = await guard.callTool("create_entities", entity("Grace"), { toolCallId: "tc-7" });
    } finally {
      await before.close();
    }
    // The runtime reconnects (a new server process, new JSON-RPC ids) and sends the same step.
    const after = await connected();
    try {
      const guard = new LedgerGuard(after, ledger, run, { server: "memory", toolTimeout: 3 });
      return [lost, await guard.callTool("create_entities", entity("Grace"), { toolCallId: "tc-7" })];
    } finally {
      await after.close();
    }
  });
  for (const result of [first, again]) {
    assert.equal(result?.isError, true);
    assert.equal(observationOf(result as CallToolResult).code, "SIDE_EFFECT_UNCERTAIN");
  }
  const grace = callsOf("create_entities").filter((call) => JSON.stringify(call).includes("Grace"));
  assert.equal(grace.length, 1);
});

// The tests below run under the policy "approve memory/delete_entities" (made here through the
// API with the runtime's token), decided by a person through the approvals API.
let policy: Promise<void> | undefined;
function askBeforeDeleting(): Promise<void> {
  policy ??= makePolicy();
  return policy;
}

async function makePolicy(): Promise<void> {
  const response = await fetch(`${ledgerUrl}/api/v1/approval-policies`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify({
      name: "memory deletes",
      reason: "deleting from the memory needs a second look",
      tool: "memory/delete_entities",
    }),
  });
  assert.equal(response.status, 201, await response.text());
}

async function deleteHeldThenDecided(
  name: string,
  approve: boolean,
  reason: string,
): Promise<[CallToolResult, Record<string, unknown>, string[]]> {
  await askBeforeDeleting();
  const mcp = await connected();
  try {
    const ledger = new LedgerClient(ledgerUrl, token);
    return await ledger.run({ userId: "u-mcp" }, async (run) => {
      const guard = new LedgerGuard(mcp, ledger, run, { server: "memory", approvalDeadline: 30 });
      await guard.listTools();
      await guard.callTool("create_entities", entity(name));
      const [result, seen] = await Promise.all([
        guard.callTool("delete_entities", { entityNames: [name] }, { toolCallId: `del-${name}` }),
        decideFirst(approve, reason),
      ]);
      return [result, seen, await entitiesOf(guard)];
    });
  } finally {
    await mcp.close();
  }
}

function deletesOf(name: string): number {
  return callsOf("delete_entities").filter((call) => JSON.stringify(call).includes(name)).length;
}

test("a delete the policy holds waits for the approver, then reaches the server once", { skip: approver }, async () => {
  const [result, seen, left] = await deleteHeldThenDecided("Linus", true, "checked");
  assert.notEqual(result.isError, true, JSON.stringify(result));
  assert.equal((result._meta?.[LEDGER_META_KEY] as { ok: boolean }).ok, true);
  assert.equal(deletesOf("Linus"), 1);
  assert.ok(!left.includes("Linus"));
  // The approver saw the exact action before deciding.
  assert.match(JSON.stringify(seen), /memory\/delete_entities/);
  assert.match(JSON.stringify(seen), /Linus/);
});

test("a rejected delete never reaches the server, and the model hears the approver's reason", { skip: approver }, async () => {
  const [result, , left] = await deleteHeldThenDecided("Barbara", false, "keep her in the memory");
  assert.equal(result.isError, true);
  const observation = observationOf(result);
  assert.equal(observation.code, "APPROVAL_REJECTED");
  assert.match(JSON.stringify(observation.content), /keep her in the memory/);
  assert.equal(deletesOf("Barbara"), 0);
  assert.ok(left.includes("Barbara"));
});

// File writes through the official filesystem server (FS_COMMAND, serving FS_ROOT), which the
// tenant's policy makes conditional: the guard sends a write plan, and a lost write settles by
// the file's hash.
const fsCommand = JSON.parse(process.env.FS_COMMAND ?? "[]") as string[];
const fsRoot = process.env.FS_ROOT ?? "";
const fsSkip = fsCommand.length === 0 ? "FS_COMMAND names no filesystem server" : skip;

async function writeThroughGuard(
  file: string,
  fault: "drop_response" | "hang",
  meanwhile: () => Promise<void> = async () => {},
): Promise<CallToolResult> {
  const fs = await connected(fsCommand);
  try {
    const ledger = new LedgerClient(ledgerUrl, token);
    return await ledger.run({ userId: "u-mcp" }, async (run) => {
      const guard = new LedgerGuard(fs, ledger, run, {
        server: "fs",
        fileRoot: fsRoot,
        toolTimeout: 3,
        waitForApproval: false,
      });
      await guard.listTools();
      writeFileSync(faults, JSON.stringify({ tool: "write_file", mode: fault }));
      const [result] = await Promise.all([
        guard.callTool("write_file", { path: join(fsRoot, file), content: "new\n" }, { toolCallId: "w-1" }),
        meanwhile(),
      ]);
      return result;
    });
  } finally {
    await fs.close();
  }
}

function writesOf(file: string): number {
  return callsOf("write_file").filter((call) => JSON.stringify(call).includes(file)).length;
}

function ledgerCode(result: CallToolResult): unknown {
  return (result._meta?.[LEDGER_META_KEY] as { code?: unknown }).code;
}

test("a lost file write that landed settles by the file's hash as already applied", { skip: fsSkip }, async () => {
  writeFileSync(join(fsRoot, "landed.txt"), "old\n");
  const result = await writeThroughGuard("landed.txt", "drop_response");
  assert.notEqual(result.isError, true, JSON.stringify(result));
  assert.equal(ledgerCode(result), "ALREADY_APPLIED");
  assert.equal(readFileSync(join(fsRoot, "landed.txt"), "utf8"), "new\n");
  assert.equal(writesOf("landed.txt"), 1);
});

test("a lost file write that never landed asks a person, showing the diff, and writes nothing", { skip: fsSkip }, async () => {
  writeFileSync(join(fsRoot, "never.txt"), "old\n");
  const result = await writeThroughGuard("never.txt", "hang");
  assert.equal(result.isError, true);
  assert.equal(ledgerCode(result), "APPROVAL_REQUIRED");
  assert.equal(readFileSync(join(fsRoot, "never.txt"), "utf8"), "old\n");
  const [request] = await approvalsWhere(
    (approval) => approval.tool === "fs/write_file" && JSON.stringify(approval).includes("never.txt"),
  );
  assert.ok(request, "the approver has the write to decide");
  const plan = (await approvalDetail(Number(request.id))).write_plan as { diff: string; path: string };
  assert.equal(plan.path, "never.txt");
  assert.match(plan.diff, /-old\n\+new/);
});

test("a lost file write whose file changed meanwhile is a conflict, and theirs is kept", { skip: fsSkip }, async () => {
  const file = join(fsRoot, "theirs.txt");
  writeFileSync(file, "old\n");
  const someoneElseWrites = async (): Promise<void> => {
    await new Promise((resolve) => setTimeout(resolve, 1000)); // while the call hangs
    writeFileSync(file, "theirs\n");
  };
  const result = await writeThroughGuard("theirs.txt", "hang", someoneElseWrites);
  assert.equal(result.isError, true);
  assert.equal(ledgerCode(result), "WRITE_CONFLICT");
  assert.equal(readFileSync(file, "utf8"), "theirs\n");
});

test("a file write outside the root fails before reaching the server", { skip: fsSkip }, async () => {
  const fs = await connected(fsCommand);
  try {
    const ledger = new LedgerClient(ledgerUrl, token);
    const result = await ledger.run({ userId: "u-mcp" }, async (run) => {
      const guard = new LedgerGuard(fs, ledger, run, { server: "fs", fileRoot: fsRoot });
      await guard.listTools();
      return guard.callTool("write_file", { path: join(fsRoot, "..", "escaped.txt"), content: "x" });
    });
    assert.equal(result.isError, true);
    assert.match(JSON.stringify(result), /outside the workspace root/);
    assert.equal(writesOf("escaped.txt"), 0);
  } finally {
    await fs.close();
  }
});
