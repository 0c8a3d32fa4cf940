//! Log events kept for the TSD's `/logs` page, in OpenTSDB's form: seconds, level, thread,
//! logger (the event's target) and message, the event's other fields after the message as
//! `key=value`.

use std::fmt::Write;

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;

/// The layer that hands each event to [`hourglass_server::logs::record_event`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecentEvents;

/// An event's message, then its other fields.
#[derive(Default)]
struct Text {
    message: String,
    fields: String,
}

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RecentEvents {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut text = Text::default();
        event.record(&mut text);
        text.message.push_str(&text.fields);
        let meta = event.metadata();
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let thread = std::thread::current();
        hourglass_server::logs::record_event(
            secs,
            meta.level().as_str(),
            thread.name().unwrap_or("unnamed"),
            meta.target(),
            &text.message,
        );
    }
}
