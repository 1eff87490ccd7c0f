/**
 * The ambient trace context: the W3C `traceparent` of the caller's active OpenTelemetry span,
 * read when `@opentelemetry/api` is installed (an optional peer dependency) and a span is
 * active, as the Python client reads the current span. A `traceparent` given to a call wins.
 */

type OpenTelemetry = typeof import("@opentelemetry/api");

const API = "@opentelemetry/api";
let loaded: Promise<OpenTelemetry | null> | undefined;

/** The active span's `traceparent`, or undefined without one (or without the API). */
export async function ambientTraceparent(): Promise<string | undefined> {
  // A specifier in a variable: bundlers leave the import to run time, where a runtime without
  // the API gets null here instead of a build that fails.
  loaded ??= (import(API) as Promise<OpenTelemetry>).then(
    (api) => api,
    () => null,
  );
  const otel = await loaded;
  const span = otel?.trace.getActiveSpan()?.spanContext();
  if (otel === null || otel === undefined || span === undefined || !otel.isSpanContextValid(span)) {
    return undefined;
  }
  const sampled = (span.traceFlags & otel.TraceFlags.SAMPLED) === otel.TraceFlags.SAMPLED;
  return `00-${span.traceId}-${span.spanId}-${sampled ? "01" : "00"}`;
}
