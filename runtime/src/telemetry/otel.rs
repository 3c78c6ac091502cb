//! The bot's spans as OpenTelemetry traces (feature `otel`): [`otlp`] builds a tracer
//! provider that batches spans to an OTLP/HTTP collector, [`layer`] turns `tracing` spans
//! into its spans, and the flow checkpoint keeps the W3C trace context of the turn that
//! wrote it (a resumed conversation's first turn links to it).
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//!
//! # fn demo() -> Result<(), botmesh::telemetry::otel::TelemetryError> {
//! let provider = botmesh::telemetry::otel::otlp("http://127.0.0.1:4318/v1/traces", "shop")?;
//! tracing_subscriber::registry()
//!     .with(botmesh::telemetry::otel::layer(&provider))
//!     .init();
//! // … run the bot; at exit, `provider.shutdown()` flushes the last batch.
//! # Ok(()) }
//! ```
//!
//! Any [`SdkTracerProvider`] works with [`layer`] (a test uses one with an in-memory
//! exporter). This module does not install a global provider or propagator.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Span;
use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt};
use tracing_subscriber::registry::LookupSpan;

use crate::telemetry::TraceContext;

/// The instrumentation scope of the bot's spans.
pub const SCOPE: &str = "botmesh";

/// Setting up the export failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The OTLP exporter could not be built for this endpoint.
    #[error("cannot build the OTLP exporter for {endpoint}: {reason}")]
    Exporter {
        /// The collector's URL.
        endpoint: String,
        /// Why.
        reason: String,
    },
}

/// A tracer provider that exports spans in batches over OTLP/HTTP (protobuf) to `endpoint`
/// (a collector's `…/v1/traces`), naming the service `service`.
pub fn otlp(endpoint: &str, service: &str) -> Result<SdkTracerProvider, TelemetryError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| TelemetryError::Exporter {
            endpoint: endpoint.to_owned(),
            reason: e.to_string(),
        })?;
    Ok(SdkTracerProvider::builder()
        .with_resource(
            Resource::builder()
                .with_service_name(service.to_owned())
                .build(),
        )
        .with_batch_exporter(exporter)
        .build())
}

/// A `tracing` layer that records spans (the bot's and the application's) with `provider`.
pub fn layer<S>(provider: &SdkTracerProvider) -> OpenTelemetryLayer<S, SdkTracer>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    tracing_opentelemetry::layer().with_tracer(provider.tracer(SCOPE))
}

/// The W3C trace context of `span`, when an OpenTelemetry layer records it.
pub(crate) fn context_of(span: &Span) -> Option<TraceContext> {
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    Some(TraceContext {
        traceparent: carrier.remove("traceparent")?,
        tracestate: carrier.remove("tracestate").filter(|s| !s.is_empty()),
    })
}

/// Links `span` to the span `context` names; an unparsable context is skipped (logged).
pub(crate) fn link(span: &Span, context: &TraceContext) {
    let mut carrier: HashMap<String, String> = HashMap::new();
    carrier.insert("traceparent".to_owned(), context.traceparent.clone());
    if let Some(state) = &context.tracestate {
        carrier.insert("tracestate".to_owned(), state.clone());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    let linked = cx.span().span_context().clone();
    if linked.is_valid() {
        span.add_link(linked);
    } else {
        tracing::debug!(traceparent = %context.traceparent, "checkpoint trace context unreadable: not linked");
    }
}
