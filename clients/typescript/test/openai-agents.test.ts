/**
 * The OpenAI Agents JS adapter, with a scripted model written to the SDK's own `Model` interface
 * (no LLM), against the running ledger and the sandbox's orders service.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  Agent,
  type Model,
  type ModelRequest,
  type ModelResponse,
  run as runAgent,
  type RunResult,
  setTracingDisabled,
  tool,
  Usage,
} from "@openai/agents";
import { z } from "zod";

import { LedgerClient } from "../src/client.js";
import { ledgerCallOf, ledgerTool } from "../src/openai-agents.js";
import { approvalsOf, decideFirst, loseNextOrder, ordersOf } from "./people.js";

const ledgerUrl = process.env.LEDGER_URL ?? "";
const token = process.env.LEDGER_TOKEN ?? "";
const sandboxUrl = process.env.SANDBOX_URL ?? "";
const skip = ledgerUrl === "" ? "LEDGER_URL names no running ledger" : false;

setTracingDisabled(true);

type Order = { id: string; cart?: string; amount?: number };

/** A model that asks for each order in turn (one per turn; a list of orders is one turn's
 * parallel calls), then says `last`. */
class Scripted implements Model {
  private readonly turns: ModelResponse[];

  constructor(calls: (Order | Order[])[], last: string) {
    this.turns = [
      ...calls.map((turn) => ({
        usage: new Usage(),
        output: [turn].flat().map((call) => ({
          type: "function_call" as const,
          callId: call.id,
          name: "create_order",
          arguments: JSON.stringify(
            call.amount === undefined
              ? { cart: call.cart, amount: 1 }
              : { cart: `amount-${call.amount}`, amount: call.amount },
          ),
          status: "completed" as const,
        })),
      })),
      {
        usage: new Usage(),
        output: [
          {
            type: "message" as const,
            role: "assistant" as const,
            status: "completed" as const,
            content: [{ type: "output_text" as const, text: last }],
          },
        ],
      },
    ];
  }

  async getResponse(_request: ModelRequest): Promise<ModelResponse> {
    const turn = this.turns.shift();
    if (turn === undefined) throw new Error("the script has no more turns");
    return turn;
  }

  getStreamedResponse(): AsyncIterable<never> {
    throw new Error("not streamed");
  }
}

function ordersAgent(
  model: Model,
  ledgerRun: Parameters<typeof ledgerTool>[0],
  callOptions: Parameters<typeof ledgerTool>[2] = {},
): Agent {
  const createOrder = tool(
    ledgerTool(ledgerRun, {
      name: "create_order",
      description: "Create an order for a cart.",
      parameters: z.object({ cart: z.string(), amount: z.number() }),
      execute: async ({ cart }: { cart: string }, _context?: unknown, details?: object) => {
        const response = await fetch(`${sandboxUrl}/orders/objects`, {
          method: "POST",
          headers: {
            "Content-Type": "application/json",
            "Idempotency-Key": ledgerCallOf(details)?.idempotencyKey ?? "",
          },
          body: JSON.stringify({ reference: cart }),
          signal: AbortSignal.timeout(500),
        });
        if (!response.ok) throw new Error(`orders answered ${response.status}`);
        return (await response.json()) as Record<string, unknown>;
      },
    }, callOptions),
  );
  return new Agent({ name: "orders", instructions: "Order what is asked.", model, tools: [createOrder] });
}

function outputsOf(items: { type: string; output?: unknown }[]): unknown[] {
  return items.filter((item) => item.type === "tool_call_output_item").map((item) => item.output);
}

test("a lost order planned again under a new call id runs once; the model hears it is uncertain", { skip }, async () => {
  await loseNextOrder();
  const ledger = new LedgerClient(ledgerUrl, token);
  const model = new Scripted(
    [
      { id: "call-1", cart: "oa-1" },
      { id: "call-2", cart: "oa-1" },
    ],
    "I will ask the user.",
  );
  const result = await ledger.run({ userId: "u-oa" }, (run) =>
    runAgent(ordersAgent(model, run), "Order cart oa-1."),
  );
  const outputs = outputsOf(result.newItems as { type: string; output?: unknown }[]);
  assert.equal(outputs.length, 2);
  for (const output of outputs) assert.match(String(JSON.stringify(output)), /SIDE_EFFECT_UNCERTAIN/);
  assert.equal(result.finalOutput, "I will ask the user.");
  assert.equal(await ordersOf("oa-1"), 1);
});

test("a lost order re-sent under its own call id, by a turn run again, runs once; the model hears it is uncertain", { skip }, async () => {
  await loseNextOrder();
  const ledger = new LedgerClient(ledgerUrl, token);
  // The SDK answers a call id once a run; the runtime re-sends the call by running the turn
  // again from the model's recorded response (as after a crash), in the same ledger run.
  const outputs = await ledger.run({ userId: "u-oa" }, async (run) => {
    const turns = [];
    for (let attempt = 0; attempt < 2; attempt += 1) {
      const model = new Scripted([{ id: "call-1", cart: "oa-3" }], "I will ask the user.");
      turns.push(await runAgent(ordersAgent(model, run), "Order cart oa-3."));
    }
    return turns.flatMap((turn) => outputsOf(turn.newItems as { type: string; output?: unknown }[]));
  });
  assert.equal(outputs.length, 2);
  for (const output of outputs) assert.match(String(JSON.stringify(output)), /SIDE_EFFECT_UNCERTAIN/);
  assert.equal(await ordersOf("oa-3"), 1);
});

test("an order planned twice is made once and the second call gets its result", { skip }, async () => {
  const ledger = new LedgerClient(ledgerUrl, token);
  const model = new Scripted(
    [
      { id: "call-1", cart: "oa-2" },
      { id: "call-2", cart: "oa-2" },
    ],
    "Done.",
  );
  const result = await ledger.run({ userId: "u-oa" }, (run) =>
    runAgent(ordersAgent(model, run), "Order cart oa-2."),
  );
  const [first, second] = outputsOf(result.newItems as { type: string; output?: unknown }[]);
  assert.deepEqual(second, first);
  assert.match(String(JSON.stringify(first)), /oa-2/);
  assert.doesNotMatch(String(JSON.stringify(first)), /SIDE_EFFECT_UNCERTAIN/);
  assert.equal(await ordersOf("oa-2"), 1);
});

const approver = (process.env.APPROVER_TOKEN ?? "") === "" ? "no approver" : skip;

test("an order the ledger's policy holds waits for the approver, then runs once", { skip: approver }, async () => {
  const ledger = new LedgerClient(ledgerUrl, token);
  const model = new Scripted([{ id: "call-7", amount: 700 }], "Ordered.");
  const [result] = await ledger.run({ userId: "u-oa" }, (run) =>
    Promise.all([
      runAgent(ordersAgent(model, run, { approvalDeadline: 30 }), "Order 700."),
      decideFirst(true, "checked"),
    ]),
  );
  const [output] = outputsOf(result.newItems as { type: string; output?: unknown }[]);
  assert.match(String(JSON.stringify(output)), /amount-700/);
  assert.equal(await ordersOf("amount-700"), 1);
});

test("a rejection reaches the model with the approver's reason, and nothing runs", { skip: approver }, async () => {
  const ledger = new LedgerClient(ledgerUrl, token);
  const model = new Scripted([{ id: "call-8", amount: 800 }], "Told.");
  const [result] = await ledger.run({ userId: "u-oa" }, (run) =>
    Promise.all([
      runAgent(ordersAgent(model, run, { approvalDeadline: 30 }), "Order 800."),
      decideFirst(false, "over budget"),
    ]),
  );
  const [output] = outputsOf(result.newItems as { type: string; output?: unknown }[]);
  assert.match(String(JSON.stringify(output)), /APPROVAL_REJECTED/);
  assert.match(String(JSON.stringify(output)), /over budget/);
  assert.equal(await ordersOf("amount-800"), 0);
});

/** An agent whose create_order has a gate of its own (the SDK asks its person first). */
function gatedAgent(model: Model, ledgerRun: Parameters<typeof ledgerTool>[0], person?: LedgerClient): Agent {
  const createOrder = tool(
    ledgerTool(
      ledgerRun,
      {
        name: "create_order",
        description: "Create an order for a cart.",
        parameters: z.object({ cart: z.string(), amount: z.number() }),
        needsApproval: true,
        execute: async ({ cart }: { cart: string }) => {
          const response = await fetch(`${sandboxUrl}/orders/objects`, {
            method: "POST",
            headers: { "Content-Type": "application/json" },
            body: JSON.stringify({ reference: cart }),
          });
          return (await response.json()) as Record<string, unknown>;
        },
      },
      person === undefined ? {} : { approver: person },
    ),
  );
  return new Agent({ name: "orders", instructions: "Order what is asked.", model, tools: [createOrder] });
}

// The SDK types a run's result by its context and agent; these tests use neither.
type Paused = RunResult<any, any>;

/**
 * An order of `amount` (call `id`) whose tool's own gate pauses the run: nothing has run and
 * the ledger has not been asked yet; then the SDK's person answers on the paused state
 * (`answer`), and the run goes on beside `meanwhile` (a ledger approver). The resumed result.
 */
async function answeredInSdk(
  id: string,
  amount: number,
  last: string,
  answer: (state: Paused["state"], item: NonNullable<Paused["interruptions"][number]>) => void,
  meanwhile: () => Promise<unknown> = async () => undefined,
): Promise<Paused> {
  const ledger = new LedgerClient(ledgerUrl, token);
  const person = new LedgerClient(ledgerUrl, process.env.APPROVER_TOKEN ?? "");
  return ledger.run({ userId: "u-oa" }, async (run) => {
    const agent = gatedAgent(new Scripted([{ id, amount }], last), run, person);
    const paused = await runAgent(agent, `Order ${amount}.`);
    const [item] = paused.interruptions;
    assert.ok(item, "the SDK asks its person first");
    assert.equal(await ordersOf(`amount-${amount}`), 0);
    assert.deepEqual(await approvalsOf(amount), [], "the ledger is not asked before the SDK's person");
    answer(paused.state, item);
    const [resumed] = await Promise.all([runAgent(agent, paused.state), meanwhile()]);
    return resumed;
  });
}

test("the SDK's person and the ledger's policy both hold an order; the SDK's approval is forwarded and it runs once", { skip: approver }, async () => {
  const result = await answeredInSdk("call-g1", 1400, "Ordered.", (state, item) => state.approve(item));
  assert.equal(result.finalOutput, "Ordered.");
  assert.equal(await ordersOf("amount-1400"), 1);
  const [decided] = await approvalsOf(1400);
  assert.equal(decided?.state, "consumed", JSON.stringify(decided));
  assert.equal(decided?.decision_reason, "approved in the agent's UI");
  assert.match(String(decided?.decided_by), /bob/);
});

test("an order the SDK's person rejects never reaches the ledger and never runs", { skip: approver }, async () => {
  const result = await answeredInSdk("call-g2", 1500, "Not ordered.", (state, item) => state.reject(item));
  assert.equal(result.finalOutput, "Not ordered.");
  assert.equal(await ordersOf("amount-1500"), 0);
  assert.deepEqual(await approvalsOf(1500), []);
});

test("an \"always approve\" in the SDK is not forwarded: the ledger's approver still decides", { skip: approver }, async () => {
  const result = await answeredInSdk(
    "call-g3",
    1600,
    "Told.",
    (state, item) => state.approve(item, { alwaysApprove: true }),
    () => decideFirst(false, "no standing approvals here"),
  );
  const outputs = outputsOf(result.newItems as { type: string; output?: unknown }[]);
  assert.match(JSON.stringify(outputs), /APPROVAL_REJECTED/);
  assert.match(JSON.stringify(outputs), /no standing approvals here/);
  assert.equal(await ordersOf("amount-1600"), 0);
});

test("a turn's parallel tool calls are asked about in one batch; each order is made once", { skip }, async () => {
  const sent: string[] = [];
  const noting: typeof fetch = async (input, init) => {
    if (init?.method === "POST") sent.push(new URL(String(input)).pathname);
    return fetch(input, init);
  };
  const ledger = new LedgerClient(ledgerUrl, token, { fetch: noting });
  const carts = ["oa-p1", "oa-p2", "oa-p3"];
  const model = new Scripted([carts.map((cart) => ({ id: `call-${cart}`, cart }))], "Ordered.");
  const result = await ledger.run({ userId: "u-oa" }, (run) =>
    runAgent(ordersAgent(model, run), "Order three carts."),
  );
  assert.equal(result.finalOutput, "Ordered.");
  assert.deepEqual(
    sent.filter((path) => /\/calls(\/batch)?$/.test(path)),
    ["/api/v1/calls/batch"],
  );
  for (const cart of carts) assert.equal(await ordersOf(cart), 1);
});
