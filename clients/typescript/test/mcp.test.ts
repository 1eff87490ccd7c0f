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
import { test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

import { LedgerClient } from "../src/client.js";
import { type CallToolResult, LEDGER_META_KEY, LedgerGuard, KEY_META_KEY } from "../src/mcp.js";

const ledgerUrl = process.env.LEDGER_URL ?? "";
const token = process.env.LEDGER_TOKEN ?? "";
const command = JSON.parse(process.env.MCP_COMMAND ?? "[]") as string[];
const faults = process.env.MCP_FAULTS ?? "";
const log = process.env.MCP_LOG ?? "";
const skip = ledgerUrl === "" || command.length === 0 ? "no ledger or MCP server named" : false;

/** The `tools/call` requests of `tool` that reached the server. */
function callsOf(tool: string): { name: string; _meta?: Record<string, unknown> }[] {
  return readFileSync(log, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { name: string; _meta?: Record<string, unknown> })
    .filter((call) => call.name === tool);
}

function observationOf(result: CallToolResult): { code?: string } {
  const [part] = result.content as { text: string }[];
  return JSON.parse(part?.text ?? "{}") as { code?: string };
}

async function connected(): Promise<Client> {
  const [program, ...args] = command;
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
