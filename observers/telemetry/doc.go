// Package telemetry holds the observers that export what tasks record to
// OpenTelemetry and Prometheus: [Metrics] (served on /metrics) and [Trace]
// (spans to an exporter, [NewOTLPExporter] for OTLP over gRPC or HTTP).
//
// They live apart from package observers for their weight: the OpenTelemetry
// SDK, the OTLP exporters (with gRPC) and the Prometheus client are several
// hundred packages that a program wanting only the [observers.Observer]
// interface, a runner, audit or hooks should not have to build
// (docs/adr/0025). They are observers like the others and run under
// [observers.InProcess] or [observers.Durable]: [Trace] is idempotent by
// (task, seq), [Metrics] is at least once.
package telemetry
