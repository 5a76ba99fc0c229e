//! A minimal `tracing` subscriber: events at INFO and above (DEBUG with
//! `STRATA_LOG=debug`) printed to stderr as `LEVEL target: message k=v`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

struct Stderr {
    max: Level,
    next_span: AtomicU64,
}

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl Subscriber for Stderr {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        *m.level() <= self.max
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed))
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &Event<'_>) {
        let m = e.metadata();
        let mut line = Line(format!("{:5} {}:", m.level(), m.target()));
        e.record(&mut line);
        eprintln!("{}", line.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Installs the stderr logger (once; later calls do nothing).
pub fn init() {
    let max = match std::env::var("STRATA_LOG").as_deref() {
        Ok("debug") => Level::DEBUG,
        Ok("trace") => Level::TRACE,
        Ok("warn") => Level::WARN,
        Ok("error") => Level::ERROR,
        _ => Level::INFO,
    };
    let _ = tracing::subscriber::set_global_default(Stderr {
        max,
        next_span: AtomicU64::new(1),
    });
}
