/**
 * The protocol without I/O: each flow is driven by a script of the ledger's answers, and the
 * test reads what it asked for.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { ToolError } from "../src/errors.js";
import {
  type Action,
  type Answer,
  batchReplies,
  batchRequest,
  type Body,
  type Executed,
  type Flow,
  LedgerProtocol,
  nextHeartbeat,
  type Reply,
  responseOf,
  withoutBatches,
} from "../src/protocol.js";

const noop = (): string => "ran";

function ok(status: number, body: unknown, retryAfter: number | null = null): Answer {
  return { kind: "response", status, body, retryAfter };
}

function executed(outcome: Executed["outcome"], extra: Partial<Executed> = {}): Executed {
  return { kind: "executed", outcome, cancelled: false, ...extra };
}

/** A call answered `execute` with a lease. */
function execute(key = "k-1", token = 1, seconds = 30): Body {
  return {
    decision: "execute",
    call_id: `call-${token}`,
    run_id: "r-1",
    step_id: "s-1",
    tool: "create_order",
    idempotency_key: key,
    lease: { fencing_token: token, seconds },
  };
}

/** Drive a flow: `answer` gives the reply to each action; every action is kept. */
function drive<T>(flow: Flow<T>, answer: (action: Action) => Reply): { value: T; actions: Action[] } {
  const actions: Action[] = [];
  let reply: Reply;
  for (;;) {
    const step = flow.next(reply);
    if (step.done) return { value: step.value, actions };
    actions.push(step.value);
    reply = answer(step.value);
  }
}

function clockedProtocol(): { protocol: LedgerProtocol; clock: { now: number } } {
  const clock = { now: 0 };
  const protocol = new LedgerProtocol({ clock: () => clock.now, random: () => 0.5 });
  return { protocol, clock };
}

test("an execute runs the tool once and reports it with the lease's fencing token", () => {
  const { protocol } = clockedProtocol();
  const completed = { ok: true, content: { order: 7 }, metadata: { replayed: false } };
  const { value, actions } = drive(protocol.call("r-1", "create_order", { cart: 9 }, noop), (a) => {
    if (a.kind === "execute") return executed("succeeded", { result: { order: 7 } });
    if (a.kind === "send" && a.request.path === "/calls") return ok(200, execute("k-1", 4));
    return ok(200, { observation: completed });
  });
  assert.deepEqual(value, completed);
  const kinds = actions.map((a) => (a.kind === "send" ? `${a.request.method} ${a.request.path}` : a.kind));
  assert.deepEqual(kinds, ["POST /calls", "execute", "POST /calls/call-4/complete"]);
  const report = actions[2];
  assert.ok(report?.kind === "send");
  assert.deepEqual(report.request.json, { fencing_token: 4, outcome: "succeeded", result: { order: 7 } });
  const run = actions[1];
  assert.ok(run?.kind === "execute");
  assert.equal(run.heartbeatEvery, 10); // a third of the 30 s lease
  assert.equal(run.context.idempotencyKey, "k-1");
});

test("a tool's own failure is reported failed; any other error is uncertain", () => {
  for (const [done, outcome] of [
    [executed("failed", { error: new ToolError("card declined", { code: "DECLINED" }) }), "failed"],
    [executed("uncertain"), "uncertain"],
  ] as const) {
    const { protocol } = clockedProtocol();
    const { actions } = drive(protocol.call("r-1", "create_order", {}, noop), (a) => {
      if (a.kind === "execute") return done;
      if (a.kind === "send" && a.request.path === "/calls") return ok(200, execute());
      return ok(200, { observation: { ok: false, content: "", metadata: {} } });
    });
    const report = actions.at(-1);
    assert.ok(report?.kind === "send");
    assert.equal((report.request.json as Body).outcome, outcome);
  }
});

test("an unreachable ledger fails a write closed, after retrying within the budget", () => {
  const { protocol, clock } = clockedProtocol();
  const { value, actions } = drive(protocol.call("r-1", "create_order", {}, noop), (a) => {
    if (a.kind === "sleep") clock.now += a.seconds;
    return a.kind === "send" ? ok(503, { code: "STORE_UNAVAILABLE" }, 2) : undefined;
  });
  assert.equal(value.code, "LEDGER_UNAVAILABLE");
  assert.ok(!actions.some((a) => a.kind === "execute"), "a write never runs without the ledger");
  const sleeps = actions.filter((a) => a.kind === "sleep").map((a) => (a as { seconds: number }).seconds);
  assert.ok(sleeps.length >= 2 && sleeps.every((s) => s >= 2), "Retry-After is honoured");
  assert.ok(clock.now <= protocol.ledgerBudget);
});

test("a read-only tool runs while the ledger is unreachable, and says it was not recorded", () => {
  const { protocol, clock } = clockedProtocol();
  const { value } = drive(protocol.call("r-1", "read_file", { path: "a" }, noop), (a) => {
    if (a.kind === "sleep") clock.now += a.seconds;
    if (a.kind === "execute") return executed("succeeded", { result: "text" });
    return a.kind === "send" ? { kind: "failure", reason: "connection refused" } : undefined;
  });
  assert.equal(value.ok, true);
  assert.equal(value.content, "text");
  assert.equal(value.metadata.recorded, false);
});

test("wait backs off and asks again; a recorded result comes back as the ledger said it", () => {
  const { protocol, clock } = clockedProtocol();
  let asked = 0;
  const recorded = { ok: true, content: { order: 7 }, metadata: { replayed: true } };
  const { value, actions } = drive(protocol.call("r-1", "create_order", {}, noop), (a) => {
    if (a.kind === "sleep") {
      clock.now += a.seconds;
      return undefined;
    }
    asked += 1;
    return asked === 1
      ? ok(409, { decision: "wait", observation: { ok: false, metadata: {} } }, 1)
      : ok(200, { decision: "recorded_result", observation: recorded });
  });
  assert.deepEqual(value, recorded);
  assert.equal(actions.filter((a) => a.kind === "sleep").length, 1);
  assert.ok(!actions.some((a) => a.kind === "execute"));
});

test("a complete that cannot be delivered is retried with the same token, then uncertain", () => {
  const { protocol, clock } = clockedProtocol();
  const tokens: unknown[] = [];
  const { value } = drive(protocol.call("r-1", "create_order", {}, noop), (a) => {
    if (a.kind === "sleep") {
      clock.now += a.seconds;
      return undefined;
    }
    if (a.kind === "execute") return executed("succeeded", { result: 1 });
    if (a.request.path === "/calls") return ok(200, execute("k-1", 3, 12));
    tokens.push((a.request.json as Body).fencing_token);
    return { kind: "failure", reason: "reset" };
  });
  assert.equal(value.code, "SIDE_EFFECT_UNCERTAIN");
  assert.ok(tokens.length >= 2 && tokens.every((t) => t === 3));
  // It keeps trying until the next back-off (at most 5 s) would pass the 12 s lease.
  assert.ok(clock.now > 12 - 5 && clock.now < 12, `stopped at ${clock.now} s`);
});

test("a key the ledger forgot is never run again by the same client", () => {
  const { protocol } = clockedProtocol();
  let runs = 0;
  const answer = (a: Action): Reply => {
    if (a.kind === "execute") {
      runs += 1;
      return executed("succeeded", { result: 1 });
    }
    if (a.kind === "sleep") return undefined;
    if (a.request.path === "/calls") return ok(200, execute("k-forgotten", 1));
    return a.request.path.endsWith("/complete") && runs === 1
      ? ok(404, { code: "NOT_FOUND" })
      : ok(200, { observation: { ok: false, content: "", metadata: {} } });
  };
  const first = drive(protocol.call("r-1", "create_order", {}, noop), answer).value;
  const again = drive(protocol.call("r-1", "create_order", {}, noop), answer).value;
  assert.equal(first.code, "SIDE_EFFECT_UNCERTAIN");
  assert.equal(again.code, "SIDE_EFFECT_UNCERTAIN");
  assert.equal(runs, 1);
});

test("an approval is waited for, and the approved call is started with its own input", () => {
  const { protocol, clock } = clockedProtocol();
  const paths: string[] = [];
  let polls = 0;
  const { value } = drive(protocol.call("r-1", "create_order", { cart: 1 }, noop), (a) => {
    if (a.kind === "sleep") {
      clock.now += a.seconds;
      return undefined;
    }
    if (a.kind === "execute") return executed("succeeded", { result: "done" });
    paths.push(`${a.request.method} ${a.request.path}`);
    if (a.request.path === "/calls") {
      return ok(200, { decision: "approval_required", call_id: "c-9", observation: {} });
    }
    if (a.request.method === "GET") {
      polls += 1;
      return ok(200, { call_id: "c-9", approval_state: polls < 2 ? "pending" : "approved" });
    }
    if (a.request.path.endsWith("/start")) {
      assert.deepEqual(a.request.json, { input: { cart: 1 } });
      return ok(200, { ...execute("k-9", 2), call_id: "c-9" });
    }
    return ok(200, { observation: { ok: true, content: "done", metadata: {} } });
  });
  assert.equal(value.ok, true);
  assert.deepEqual(paths, [
    "POST /calls",
    "GET /calls/c-9",
    "GET /calls/c-9",
    "POST /calls/c-9/start",
    "POST /calls/c-9/complete",
  ]);
});

test("heartbeats follow the lease the server grants, and stop when it is refused", () => {
  assert.equal(nextHeartbeat(ok(200, { lease_seconds: 60 }), 5), 20);
  assert.equal(nextHeartbeat(ok(503, {}), 5), 5);
  assert.equal(nextHeartbeat({ kind: "failure", reason: "reset" }, 5), 5);
  assert.equal(nextHeartbeat(ok(409, { code: "LEASE_LOST" }), 5), null);
});

test("an answer that is not JSON is a problem, and Retry-After is read in seconds", () => {
  const answer = responseOf(502, "3", "<html>bad gateway</html>");
  assert.deepEqual(answer.body, { code: "HTTP_ERROR", detail: "<html>bad gateway</html>" });
  assert.equal(answer.retryAfter, 3);
  assert.equal(responseOf(200, "soon", "").retryAfter, null);
});

test("a batch carries its calls and waits as long as the least patient", () => {
  const batch = batchRequest([
    { method: "POST", path: "/calls", json: { step_id: "a" }, timeout: 4, traceparent: "00-t-s-01" },
    { method: "POST", path: "/calls", json: { step_id: "b" }, timeout: 2.5, traceparent: "00-t-s-01" },
  ]);
  assert.equal(batch.path, "/calls/batch");
  assert.deepEqual(batch.json, { calls: [{ step_id: "a" }, { step_id: "b" }] });
  assert.equal(batch.timeout, 2.5);
  assert.equal(batch.traceparent, "00-t-s-01");
});

test("each call gets its own reply from the batch", () => {
  const problem = { code: "NOT_FOUND", status: 404, detail: "no run" };
  const results = [
    { status: 200, call: { decision: "execute" }, problem: null, retry_after: null },
    { status: 409, call: { decision: "wait" }, problem: null, retry_after: 1 },
    { status: 404, call: null, problem, retry_after: null },
  ];
  assert.deepEqual(batchReplies(ok(200, { results }), 3), [
    ok(200, { decision: "execute" }),
    ok(409, { decision: "wait" }, 1),
    ok(404, problem),
  ]);
});

test("a batch that failed as a whole is each call's reply", () => {
  for (const reply of [
    ok(503, { code: "LEDGER_STORE_UNAVAILABLE" }, 2),
    { kind: "failure", reason: "socket hang up" } as Answer,
    ok(401, { code: "UNAUTHENTICATED" }),
  ]) {
    assert.deepEqual(batchReplies(reply, 2), [reply, reply]);
  }
});

test("a batch refused as such sends each call alone", () => {
  for (const reply of [
    ok(405, { detail: "Method not allowed" }),
    ok(404, { code: "NOT_FOUND" }),
    ok(400, { code: "INVALID_INPUT" }),
    ok(413, { code: "PAYLOAD_TOO_LARGE" }),
    ok(200, { results: [] }),
    ok(200, "not a batch"),
    ok(200, { results: [{ status: 200 }, null] }),
  ]) {
    assert.equal(batchReplies(reply, 2), null);
    assert.equal(withoutBatches(reply), reply.kind === "response" && [404, 405].includes(reply.status));
  }
});
