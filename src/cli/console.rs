//! What the front ends print as a session runs: one line per event on stderr (and the
//! model's streamed text, when asked for).

use std::io::Write;

use crate::events::{Event, EventSink};

/// Prints one line per event to standard error; with `stream`, also the model's text.
pub struct ConsoleSink {
    pub stream: bool,
}

impl EventSink for ConsoleSink {
    fn emit(&self, e: &Event) {
        let mut err = std::io::stderr().lock();
        match e {
            Event::ModelDelta { text } if self.stream => {
                let _ = write!(err, "{text}");
            }
            _ => {
                if let Some(l) = e.line() {
                    let _ = writeln!(err, "{l}");
                }
            }
        }
    }
}
