/**
 * The client against a running ledger and the sandbox's orders service (a real HTTP service that
 * counts the orders it made): `tests/client/test_typescript_client.py` starts both and names
 * them in LEDGER_URL, LEDGER_TOKEN and SANDBOX_URL. Side effects are counted in the sandbox's
 * own state, never in the ledger's rows.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { LedgerClient } from "../src/client.js";
import type { CallContext } from "../src/protocol.js";
import { loseNextOrder, ordersOf } from "./people.js";

const ledgerUrl = process.env.LEDGER_URL ?? "";
const token = process.env.LEDGER_TOKEN ?? "";
const sandboxUrl = process.env.SANDBOX_URL ?? "";
const skip = ledgerUrl === "" ? "LEDGER_URL names no running ledger" : false;

/** `create_order` at the sandbox, giving up after `timeout` ms as a runtime's HTTP client does. */
function createOrder(timeout = 500) {
  return async (context: CallContext, signal: AbortSignal): Promise<unknown> => {
    const response = await fetch(`${sandboxUrl}/orders/objects`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "Idempotency-Key": context.idempotencyKey },
      body: JSON.stringify({ reference: context.input.cart }),
      signal: AbortSignal.any([signal, AbortSignal.timeout(timeout)]),
    });
    if (!response.ok) throw new Error(`orders answered ${response.status}`);
    return response.json();
  };
}

/** The ledger's fetch, noting each request's method, path and body. */
function noting(sent: [string, string, Record<string, unknown> | null][]): typeof fetch {
  return async (input, init) => {
    const body = typeof init?.body === "string" ? (JSON.parse(init.body) as Record<string, unknown>) : null;
    sent.push([init?.method ?? "GET", new URL(String(input)).pathname, body]);
    return fetch(input, init);
  };
}

test("calls started together start their run once and are asked about in one batch", { skip }, async () => {
  const sent: [string, string, Record<string, unknown> | null][] = [];
  const ledger = new LedgerClient(ledgerUrl, token, { fetch: noting(sent) });
  const runId = `ts-turn-${Date.now()}`;
  // Each call of the turn starts its run, as the adapters do; the last repeats the first's order.
  const answers = await Promise.all(
    ["ts-b1", "ts-b2", "ts-b3", "ts-b1"].map(async (cart, n) => {
      const run = await ledger.startRun({ userId: "u-ts", runId });
      return run.call("create_order", { cart }, createOrder(5000), { stepId: `s${n}` });
    }),
  );
  assert.equal(sent.filter(([, path]) => path.endsWith("/runs")).length, 1);
  const asked = sent.filter(([method, path]) => method === "POST" && /\/calls(\/batch)?$/.test(path));
  assert.match(asked[0]?.[1] ?? "", /\/calls\/batch$/);
  assert.deepEqual(
    (asked[0]?.[2]?.calls as { step_id: string }[]).map((call) => call.step_id),
    ["s0", "s1", "s2", "s3"],
  );
  for (const cart of ["ts-b1", "ts-b2", "ts-b3"]) assert.equal(await ordersOf(cart), 1);
  assert.deepEqual(answers[3]?.content, answers[0]?.content);
  assert.equal(answers[3]?.metadata.replayed, true);
});

test("a call whose input is not JSON fails by itself; the rest of its turn goes as one batch", { skip }, async () => {
  const sent: [string, string, Record<string, unknown> | null][] = [];
  const ledger = new LedgerClient(ledgerUrl, token, { fetch: noting(sent) });
  const run = await ledger.startRun({ userId: "u-ts" });
  const settled = await Promise.allSettled([
    run.call("create_order", { cart: "ts-j1" }, createOrder(5000), { stepId: "j1" }),
    run.call("create_order", { cart: 1n as unknown as string }, createOrder(5000), { stepId: "j2" }),
    run.call("create_order", { cart: "ts-j3" }, createOrder(5000), { stepId: "j3" }),
  ]);
  assert.deepEqual(
    settled.map((outcome) => outcome.status),
    ["fulfilled", "rejected", "fulfilled"],
  );
  const asked = sent.filter(([method, path]) => method === "POST" && /\/calls(\/batch)?$/.test(path));
  assert.equal(asked.length, 1);
  assert.deepEqual(
    (asked[0]?.[2]?.calls as { step_id: string }[]).map((call) => call.step_id),
    ["j1", "j3"],
  );
  for (const cart of ["ts-j1", "ts-j3"]) assert.equal(await ordersOf(cart), 1);
});

test("an order made and re-planned by the model runs once and gets the recorded result", { skip }, async () => {
  const ledger = new LedgerClient(ledgerUrl, token);
  const [first, again] = await ledger.run({ userId: "u-ts" }, async (run) => [
    await run.call("create_order", { cart: "ts-1" }, createOrder()),
    // The model plans the same order again: a new tool call, the same arguments.
    await run.call("create_order", { cart: "ts-1" }, createOrder()),
  ]);
  assert.equal(first?.ok, true);
  assert.equal(again?.ok, true);
  assert.equal(again?.metadata.replayed, true);
  assert.deepEqual(again?.content, first?.content);
  assert.equal(await ordersOf("ts-1"), 1);
});

test("a lost order, re-planned, runs once and the model is told it is uncertain", { skip }, async () => {
  await loseNextOrder();
  const ledger = new LedgerClient(ledgerUrl, token);
  const [lost, replanned] = await ledger.run({ userId: "u-ts" }, async (run) => [
    await run.call("create_order", { cart: "ts-2" }, createOrder()),
    await run.call("create_order", { cart: "ts-2" }, createOrder()),
  ]);
  assert.equal(lost?.code, "SIDE_EFFECT_UNCERTAIN");
  assert.equal(replanned?.code, "SIDE_EFFECT_UNCERTAIN");
  assert.equal(replanned?.metadata.retryable, false);
  assert.equal(await ordersOf("ts-2"), 1);
});

test("an abort while the tool runs leaves the call uncertain at once", { skip }, async () => {
  const ledger = new LedgerClient(ledgerUrl, token);
  const run = await ledger.startRun({ userId: "u-ts" });
  const controller = new AbortController();
  let callId = "";
  const hangs = (context: CallContext, signal: AbortSignal): Promise<never> => {
    callId = context.callId;
    setTimeout(() => controller.abort(), 200);
    return new Promise((_resolve, reject) => {
      signal.addEventListener("abort", () => reject(new Error("abandoned")), { once: true });
    });
  };
  const started = performance.now();
  await assert.rejects(
    run.call("send_email", { to: "a@example.com", subject: "hi" }, hangs, {
      signal: controller.signal,
    }),
    { name: "AbortError" },
  );
  const call = await ledger.getCall(callId);
  assert.equal(call.record_state, "unknown");
  // Reported before a first heartbeat could have been due (a third of the lease).
  assert.ok(performance.now() - started < 5_000);
  await run.finish("cancelled");
});
