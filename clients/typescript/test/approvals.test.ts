/**
 * Approvals through the client, against the running ledger under the policy "approve
 * create_order when amount > 100" (made by `tests/client/test_typescript_client.py`), decided by
 * a person with the approver role through the approvals API with a token of their own
 * (APPROVER_TOKEN). The orders are counted at the sandbox by reference (`amount-<n>`).
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { LedgerClient } from "../src/client.js";
import type { CallContext } from "../src/protocol.js";
import { decideFirst, ordersOf } from "./people.js";

const ledgerUrl = process.env.LEDGER_URL ?? "";
const token = process.env.LEDGER_TOKEN ?? "";
const sandboxUrl = process.env.SANDBOX_URL ?? "";
const skip = (process.env.APPROVER_TOKEN ?? "") === "" ? "APPROVER_TOKEN names no approver" : false;

async function createOrder(context: CallContext, signal: AbortSignal): Promise<unknown> {
  const response = await fetch(`${sandboxUrl}/orders/objects`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": context.idempotencyKey },
    body: JSON.stringify({ reference: `amount-${String(context.input.amount)}` }),
    signal,
  });
  if (!response.ok) throw new Error(`orders answered ${response.status}`);
  return response.json();
}

test("an order the policy holds waits for the approver, then runs once", { skip }, async () => {
  const ledger = new LedgerClient(ledgerUrl, token);
  const [observation, seen] = await ledger.run({ userId: "u-approvals" }, (run) =>
    Promise.all([
      run.call("create_order", { amount: 500 }, createOrder, { approvalDeadline: 30 }),
      decideFirst(true, "checked with the customer"),
    ]),
  );
  assert.equal(observation.ok, true, JSON.stringify(observation));
  assert.equal(await ordersOf("amount-500"), 1);
  // The approver saw the exact action before deciding.
  assert.match(JSON.stringify(seen), /create_order/);
  assert.match(JSON.stringify(seen), /500/);
});

test("a rejected order never runs, and the model hears the approver's reason", { skip }, async () => {
  const ledger = new LedgerClient(ledgerUrl, token);
  const [observation] = await ledger.run({ userId: "u-approvals" }, (run) =>
    Promise.all([
      run.call("create_order", { amount: 600 }, createOrder, { approvalDeadline: 30 }),
      decideFirst(false, "the customer cancelled"),
    ]),
  );
  assert.equal(observation.code, "APPROVAL_REJECTED");
  assert.match(String(observation.content), /the customer cancelled/);
  assert.equal(await ordersOf("amount-600"), 0);
});

test("a small order is not held", { skip }, async () => {
  const ledger = new LedgerClient(ledgerUrl, token);
  const observation = await ledger.run({ userId: "u-approvals" }, (run) =>
    run.call("create_order", { amount: 50 }, createOrder),
  );
  assert.equal(observation.ok, true);
  assert.equal(await ordersOf("amount-50"), 1);
});
