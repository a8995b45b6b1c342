//! Server-sent events framing: bytes in, `(event, data)` out.
//!
//! Lines end in `\n`, `\r\n` or `\r`; an empty line ends an event; `data:` lines join with
//! `\n`; comment lines (`:`) are ignored. A frame larger than [`MAX_EVENT`] or bytes that
//! are not UTF-8 are a decode error: the stream is broken, not merely odd.

/// The largest event rebound accepts.
pub const MAX_EVENT: usize = 1 << 20;

/// One event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, empty for the default `message`.
    pub event: String,
    /// The joined `data:` lines.
    pub data: String,
    /// The stream offset just past this event's terminating blank line: every byte before
    /// it belongs to this or an earlier event. Lets a proxy forward whole events untouched.
    pub end: u64,
}

/// A broken stream.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// An event grew past [`MAX_EVENT`].
    #[error("an SSE event is larger than {MAX_EVENT} bytes")]
    TooLarge,
    /// The bytes are not UTF-8.
    #[error("the SSE stream is not UTF-8")]
    NotUtf8,
}

/// Incremental framer.
#[derive(Debug, Default)]
pub struct SseFramer {
    buffer: Vec<u8>,
    /// Stream offset of `buffer[0]`.
    base: u64,
    current: SseEvent,
    has_data: bool,
}

impl SseFramer {
    /// A framer with nothing buffered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i < self.buffer.len() {
            let b = self.buffer[i];
            if b == b'\n' || b == b'\r' {
                // A lone `\r` at the end of the buffer may be the first half of `\r\n`.
                if b == b'\r' && i + 1 == self.buffer.len() {
                    break;
                }
                let line = std::str::from_utf8(&self.buffer[start..i])
                    .map_err(|_| SseError::NotUtf8)?
                    .to_owned();
                let next = if b == b'\r' && self.buffer.get(i + 1) == Some(&b'\n') {
                    i + 2
                } else {
                    i + 1
                };
                if let Some(mut event) = self.line(&line) {
                    event.end = self.base + next as u64;
                    events.push(event);
                }
                start = next;
                i = next;
                continue;
            }
            i += 1;
        }
        self.buffer.drain(..start);
        self.base += start as u64;
        if self.buffer.len() + self.current.data.len() > MAX_EVENT {
            return Err(SseError::TooLarge);
        }
        Ok(events)
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            if !self.has_data && self.current.event.is_empty() {
                return None;
            }
            self.has_data = false;
            return Some(std::mem::take(&mut self.current));
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.current.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut framer = SseFramer::new();
        chunks
            .iter()
            .flat_map(|c| framer.push(c).unwrap())
            .collect()
    }

    #[test]
    fn events_split_anywhere() {
        let text = b"event: message_start\ndata: {\"a\":1}\n\n: keep-alive\n\ndata: x\ndata: y\n\n";
        let whole = all(&[text]);
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[0].event, "message_start");
        assert_eq!(whole[1].data, "x\ny");
        for cut in 0..text.len() {
            assert_eq!(all(&[&text[..cut], &text[cut..]]), whole, "cut at {cut}");
        }
    }

    #[test]
    fn event_ends_are_stream_offsets() {
        let mut framer = SseFramer::new();
        let first = framer.push(b"data: a\n\nda").unwrap();
        assert_eq!(first[0].end, 9);
        let second = framer.push(b"ta: b\n\n").unwrap();
        assert_eq!(second[0].end, 18);
    }

    #[test]
    fn crlf_and_cr_line_ends() {
        assert_eq!(
            all(&[b"data: a\r\n\r\ndata: b\r\rdata: c\r", b"\n\r\n"]).len(),
            3
        );
    }

    #[test]
    fn garbage_is_an_error() {
        assert_eq!(
            SseFramer::new().push(b"data: \xff\xfe\n\n"),
            Err(SseError::NotUtf8)
        );
        let big = vec![b'a'; MAX_EVENT + 1];
        assert_eq!(SseFramer::new().push(&big), Err(SseError::TooLarge));
    }
}
