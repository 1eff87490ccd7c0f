/**
 * The table of call cases both clients run (`tests/client/cases/calls.json`, named in CASES),
 * through the TypeScript client against the running ledger; `tests/client/test_case_table.py`
 * runs the same table through the Python client.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { LedgerClient } from "../src/client.js";
import { ToolError } from "../src/errors.js";
import type { Observation } from "../src/observations.js";
import type { CallOptions } from "../src/protocol.js";

type Attempt =
  | "slow"
  | "lost"
  | { returns: unknown }
  | { tool_error: { code: string; message: string; retryable: boolean } };

interface Case {
  name: string;
  tool: string;
  input: Record<string, unknown>;
  attempts: Attempt[];
  calls: { step_id?: string; business_object_id?: string; timeout?: number; restarted?: boolean }[];
  expect: {
    calls?: Record<string, unknown>[];
    every_call?: Record<string, unknown>;
    executions: number;
  };
}

const ledgerUrl = process.env.LEDGER_URL ?? "";
const token = process.env.LEDGER_TOKEN ?? "";
const table = process.env.CASES ?? "";
const cases: Case[] = table ? (JSON.parse(readFileSync(table, "utf8")) as { cases: Case[] }).cases : [];
const TOP_LEVEL = new Set(["ok", "code", "content"]);

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A case's tool: what it does on each execution, and how many times it ran. */
function toolOf(attempts: Attempt[]): { execute: () => Promise<unknown>; executions: () => number } {
  let executions = 0;
  const execute = async (): Promise<unknown> => {
    executions += 1;
    const attempt = attempts[Math.min(executions, attempts.length) - 1];
    if (attempt === "slow") {
      await sleep(1000); // past the call's timeout
      return { late: true };
    }
    if (attempt === "lost" || attempt === undefined) {
      throw new Error("the connection was lost after the request was sent");
    }
    if ("tool_error" in attempt) {
      const error = attempt.tool_error;
      throw new ToolError(error.message, { code: error.code, retryable: error.retryable });
    }
    return attempt.returns;
  };
  return { execute, executions: () => executions };
}

function optionsOf(call: Case["calls"][number]): CallOptions {
  const options: CallOptions = {};
  if (call.step_id) options.stepId = call.step_id;
  if (call.business_object_id) options.businessObjectId = call.business_object_id;
  if (call.timeout !== undefined) options.timeout = call.timeout;
  return options;
}

for (const each of cases) {
  test(each.name, async () => {
    const ledger = new LedgerClient(ledgerUrl, token);
    const tool = toolOf(each.attempts);
    const observations: Observation[] = await ledger.run({ userId: "u-cases" }, async (run) => {
      const found: Observation[] = [];
      for (const call of each.calls) {
        // A restarted runtime: a new client continues the run.
        const caller = call.restarted
          ? await new LedgerClient(ledgerUrl, token).startRun({ userId: "u-cases", runId: run.runId })
          : run;
        found.push(await caller.call(each.tool, { ...each.input }, tool.execute, optionsOf(call)));
      }
      return found;
    });
    const wanted = each.expect.calls ?? each.calls.map(() => each.expect.every_call ?? {});
    assert.equal(observations.length, wanted.length);
    observations.forEach((observation, index) => {
      for (const [name, value] of Object.entries(wanted[index] ?? {})) {
        const where = TOP_LEVEL.has(name)
          ? (observation as unknown as Record<string, unknown>)
          : observation.metadata;
        assert.deepEqual(where[name], value, `call ${index + 1}: ${name}`);
      }
    });
    assert.equal(tool.executions(), each.expect.executions, "executions");
  });
}

test("the table names cases", { skip: table === "" ? "CASES names no table" : false }, () => {
  assert.ok(cases.length > 0);
});
