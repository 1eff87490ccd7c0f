/**
 * The ambient trace context: a call made while the runtime's own OpenTelemetry span is active
 * carries that span's `traceparent` to the ledger. `tests/client/test_typescript_client.py`
 * names the trace in TRACE_ID and reads the ledger's spans afterwards.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { context, trace, TraceFlags } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";

import { LedgerClient } from "../src/client.js";
import { ambientTraceparent } from "../src/trace.js";

const ledgerUrl = process.env.LEDGER_URL ?? "";
const token = process.env.LEDGER_TOKEN ?? "";
const traceId = process.env.TRACE_ID ?? "";
const skip = traceId === "" ? "TRACE_ID names no trace" : false;

// The runtime's tracing: spans follow the async calls (as with the OpenTelemetry Node SDK).
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

test("without an active span there is no ambient trace context", async () => {
  assert.equal(await ambientTraceparent(), undefined);
});

test("a call made under the runtime's active span carries its trace to the ledger", { skip }, async () => {
  const span = trace.wrapSpanContext({
    traceId,
    spanId: "00f067aa0ba902b7",
    traceFlags: TraceFlags.SAMPLED,
  });
  const ledger = new LedgerClient(ledgerUrl, token);
  const observation = await context.with(trace.setSpan(context.active(), span), async () => {
    assert.equal(await ambientTraceparent(), `00-${traceId}-00f067aa0ba902b7-01`);
    return ledger.run({ userId: "u-trace" }, (run) =>
      run.call("read_file", { path: "traced.txt" }, async () => ({ content: "x" })),
    );
  });
  assert.equal(observation.ok, true);
});
