/** What the live tests share: the sandbox's orders counted by reference, and a person with the
 * approver role deciding through the approvals API with a token of their own (APPROVER_TOKEN). */

import assert from "node:assert/strict";

const ledgerUrl = process.env.LEDGER_URL ?? "";
const sandboxUrl = process.env.SANDBOX_URL ?? "";

/** The sandbox's orders service makes the next order, then never answers (a lost response). */
export async function loseNextOrder(): Promise<void> {
  const response = await fetch(`${sandboxUrl}/_faults`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ service: "orders", mode: "timeout_after_commit", hang_seconds: 2 }),
  });
  assert.equal(response.status, 201, await response.text());
}

/** How many orders the sandbox made for `reference`. */
export async function ordersOf(reference: string): Promise<number> {
  const stats = (await (await fetch(`${sandboxUrl}/orders/stats`)).json()) as {
    per_reference: Record<string, number>;
  };
  return stats.per_reference[reference] ?? 0;
}

/** The approver reads the first open request, then decides it; what the request showed. */
export async function decideFirst(
  approve: boolean,
  reason: string,
): Promise<Record<string, unknown>> {
  const approverToken = process.env.APPROVER_TOKEN ?? "";
  const headers = { Authorization: `Bearer ${approverToken}`, "Content-Type": "application/json" };
  const deadline = performance.now() + 20_000;
  while (performance.now() < deadline) {
    const open = (await (
      await fetch(`${ledgerUrl}/api/v1/approvals?state=open`, { headers })
    ).json()) as { id: number }[];
    const first = open[0];
    if (first !== undefined) {
      const seen = (await (
        await fetch(`${ledgerUrl}/api/v1/approvals/${first.id}`, { headers })
      ).json()) as Record<string, unknown>;
      const decided = await fetch(`${ledgerUrl}/api/v1/approvals/${first.id}/decide`, {
        method: "POST",
        headers,
        body: JSON.stringify({ decision: approve ? "approve" : "reject", reason }),
      });
      assert.equal(decided.status, 200, await decided.text());
      return seen;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error("no approval was asked for");
}

const approverHeaders = (): Record<string, string> => ({
  Authorization: `Bearer ${process.env.APPROVER_TOKEN ?? ""}`,
});

/** The ledger's approval requests, in any state, that `wanted` picks. */
export async function approvalsWhere(
  wanted: (approval: Record<string, unknown>) => boolean,
): Promise<Record<string, unknown>[]> {
  const found: Record<string, unknown>[] = [];
  for (const state of ["open", "approved", "rejected", "consumed"]) {
    const listed = await fetch(`${ledgerUrl}/api/v1/approvals?state=${state}`, {
      headers: approverHeaders(),
    });
    found.push(...((await listed.json()) as Record<string, unknown>[]));
  }
  return found.filter(wanted);
}

/** The ledger's approval requests, in any state, for an order of `amount`. */
export function approvalsOf(amount: number): Promise<Record<string, unknown>[]> {
  return approvalsWhere((approval) => (approval.input as { amount?: number }).amount === amount);
}

/** One approval request as the approver reads it (with the write plan of a file write). */
export async function approvalDetail(id: number): Promise<Record<string, unknown>> {
  const response = await fetch(`${ledgerUrl}/api/v1/approvals/${id}`, { headers: approverHeaders() });
  return (await response.json()) as Record<string, unknown>;
}
