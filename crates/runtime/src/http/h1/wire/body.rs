//! Body framing: a response body taken out of the bytes read, piece by piece (content-length,
//! chunked, or to the end of the connection).

use bytes::{Buf, Bytes, BytesMut};

use super::WireError;

/// The longest chunk-size line, extensions included.
const MAX_CHUNK_LINE: usize = 4 << 10;

/// The largest trailer section accepted (it is read and dropped).
const MAX_TRAILERS: usize = 16 << 10;

/// How a response body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body at all.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// `transfer-encoding: chunked`.
    Chunked,
    /// Until the server closes the connection.
    Close,
}

/// What [`BodyDecoder::decode`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Body bytes.
    Data(Bytes),
    /// Nothing complete yet: read more.
    NeedMore,
    /// The body is complete.
    End,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Length(u64),
    Close,
    ChunkSize,
    ChunkData(u64),
    ChunkEnd,
    Trailers(usize),
    Done,
}

/// Takes a response body out of the bytes read from the connection, piece by piece, without
/// copying: each piece shares the read buffer's memory.
#[derive(Clone, Debug)]
pub struct BodyDecoder {
    state: State,
}

impl BodyDecoder {
    /// A decoder for this framing.
    pub fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Empty | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::ChunkSize,
            Framing::Close => State::Close,
        };
        BodyDecoder { state }
    }

    /// Whether the body is complete.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Whether the body runs to the end of the connection.
    pub fn is_close_delimited(&self) -> bool {
        self.state == State::Close
    }

    /// The next piece of body from `buf`, consuming what it used (framing included).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, WireError> {
        loop {
            match self.state {
                State::Done => return Ok(Decoded::End),
                State::Length(remaining) => {
                    let Some((data, left)) = take_up_to(buf, remaining) else {
                        return Ok(Decoded::NeedMore);
                    };
                    self.state = if left == 0 {
                        State::Done
                    } else {
                        State::Length(left)
                    };
                    return Ok(Decoded::Data(data));
                }
                State::Close => {
                    let Some((data, _)) = take_up_to(buf, u64::MAX) else {
                        return Ok(Decoded::NeedMore);
                    };
                    return Ok(Decoded::Data(data));
                }
                State::ChunkSize => {
                    let Some(line) =
                        line_end(buf, MAX_CHUNK_LINE, "chunk-size line", MAX_CHUNK_LINE)?
                    else {
                        return Ok(Decoded::NeedMore);
                    };
                    let size = parse_chunk_size(&buf[..line])?;
                    buf.advance(line + 2);
                    self.state = if size == 0 {
                        State::Trailers(0)
                    } else {
                        State::ChunkData(size)
                    };
                }
                State::ChunkData(remaining) => {
                    let Some((data, left)) = take_up_to(buf, remaining) else {
                        return Ok(Decoded::NeedMore);
                    };
                    self.state = if left == 0 {
                        State::ChunkEnd
                    } else {
                        State::ChunkData(left)
                    };
                    return Ok(Decoded::Data(data));
                }
                State::ChunkEnd => {
                    if buf.len() < 2 {
                        return Ok(Decoded::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(WireError::new(
                            "invalid chunked body: a chunk's data is not followed by CRLF",
                        ));
                    }
                    buf.advance(2);
                    self.state = State::ChunkSize;
                }
                State::Trailers(seen) => {
                    let room = MAX_TRAILERS.saturating_sub(seen);
                    let Some(line) = line_end(buf, room, "trailer section", MAX_TRAILERS)? else {
                        return Ok(Decoded::NeedMore);
                    };
                    buf.advance(line + 2);
                    self.state = if line == 0 {
                        State::Done
                    } else {
                        State::Trailers(seen + line + 2)
                    };
                }
            }
        }
    }

    /// The connection ended (the peer closed it). Completes a body that runs to the end of
    /// the connection; any other unfinished body was cut short.
    pub fn at_eof(&mut self) -> Result<(), WireError> {
        match self.state {
            State::Done => Ok(()),
            State::Close => {
                self.state = State::Done;
                Ok(())
            }
            State::Length(left) => Err(WireError::new(format!(
                "the connection closed {left} bytes before the end of the body"
            ))),
            _ => Err(WireError::new(
                "the connection closed before the chunked body's last chunk",
            )),
        }
    }
}

/// Up to `remaining` bytes from the start of `buf`, and how many remain after them; `None`
/// when `buf` is empty. An emptied buffer keeps no memory: taking all of it takes it whole.
fn take_up_to(buf: &mut BytesMut, remaining: u64) -> Option<(Bytes, u64)> {
    if buf.is_empty() {
        return None;
    }
    let n = usize::try_from(remaining).map_or(buf.len(), |r| r.min(buf.len()));
    let data = if n == buf.len() {
        std::mem::take(buf).freeze()
    } else {
        buf.split_to(n).freeze()
    };
    Some((data, remaining - n as u64))
}

/// Where the CRLF-ended line at the start of `buf` ends (the index of its CR), or `None` while
/// it is incomplete. The line, CRLF included, may take at most `max` bytes; `what` and `limit`
/// name the kind of line and the most its kind may take, for the error.
fn line_end(buf: &[u8], max: usize, what: &str, limit: usize) -> Result<Option<usize>, WireError> {
    match buf[..buf.len().min(max)].iter().position(|&b| b == b'\n') {
        Some(lf) if lf > 0 && buf[lf - 1] == b'\r' => Ok(Some(lf - 1)),
        Some(_) => Err(WireError::new(format!(
            "invalid chunked body: a bare LF in a {what}"
        ))),
        None if buf.len() >= max => Err(WireError::new(format!(
            "invalid chunked body: a {what} longer than {limit} bytes"
        ))),
        None => Ok(None),
    }
}

/// A chunk-size line without its CRLF: hex digits, optional whitespace, optional extensions.
fn parse_chunk_size(line: &[u8]) -> Result<u64, WireError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let invalid = || {
        WireError::new(format!(
            "invalid chunked body: bad chunk-size line `{}`",
            String::from_utf8_lossy(&line[..line.len().min(64)])
        ))
    };
    if digits == 0 || digits > 16 {
        return Err(invalid());
    }
    let rest = line[digits..].trim_ascii_start();
    if !(rest.is_empty() || rest[0] == b';') {
        return Err(invalid());
    }
    line[..digits].iter().try_fold(0u64, |n, &d| {
        let v = (d as char).to_digit(16).ok_or_else(invalid)?;
        n.checked_mul(16)
            .and_then(|n| n.checked_add(u64::from(v)))
            .ok_or_else(invalid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` to a decoder `step` bytes at a time, as reads would deliver it; returns
    /// the body and whether it ended.
    fn decode_in_steps(
        framing: Framing,
        wire: &[u8],
        step: usize,
    ) -> Result<(Vec<u8>, bool), WireError> {
        let mut decoder = BodyDecoder::new(framing);
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        for piece in wire.chunks(step.max(1)) {
            buf.extend_from_slice(piece);
            loop {
                match decoder.decode(&mut buf)? {
                    Decoded::Data(data) => body.extend_from_slice(&data),
                    Decoded::NeedMore => break,
                    Decoded::End => return Ok((body, true)),
                }
            }
        }
        Ok((body, false))
    }

    #[test]
    fn bodies_decode_the_same_at_every_read_size() {
        let chunked = b"5;name=value\r\nhello\r\n7 \r\n, world\r\n0\r\nx-trailer: 1\r\n\r\n";
        let length = b"hello, world";
        for step in 1..=chunked.len() {
            assert_eq!(
                decode_in_steps(Framing::Chunked, chunked, step),
                Ok((b"hello, world".to_vec(), true)),
                "chunked, step {step}"
            );
            assert_eq!(
                decode_in_steps(Framing::Length(12), length, step),
                Ok((length.to_vec(), true)),
                "length, step {step}"
            );
        }
        assert_eq!(
            decode_in_steps(Framing::Close, length, 5),
            Ok((length.to_vec(), false))
        );
        assert_eq!(
            decode_in_steps(Framing::Empty, b"", 1),
            Ok((Vec::new(), false))
        );
    }

    #[test]
    fn a_decoder_leaves_what_follows_its_body() {
        let mut decoder = BodyDecoder::new(Framing::Length(3));
        let mut buf = BytesMut::from(&b"abcHTTP/1.1"[..]);
        assert_eq!(
            decoder.decode(&mut buf),
            Ok(Decoded::Data(Bytes::from_static(b"abc")))
        );
        assert_eq!(decoder.decode(&mut buf), Ok(Decoded::End));
        assert_eq!(&buf[..], b"HTTP/1.1");
        let mut decoder = BodyDecoder::new(Framing::Chunked);
        let mut buf = BytesMut::from(&b"1\r\na\r\n0\r\n\r\nnext"[..]);
        assert_eq!(
            decoder.decode(&mut buf),
            Ok(Decoded::Data(Bytes::from_static(b"a")))
        );
        assert_eq!(decoder.decode(&mut buf), Ok(Decoded::End));
        assert_eq!(&buf[..], b"next");
    }

    #[test]
    fn broken_chunked_bodies_are_named() {
        let err = |wire: &[u8]| {
            decode_in_steps(Framing::Chunked, wire, 64)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(b"zz\r\n"),
            "invalid chunked body: bad chunk-size line `zz`"
        );
        assert_eq!(
            err(b"11111111111111111\r\n"),
            "invalid chunked body: bad chunk-size line `11111111111111111`"
        );
        assert_eq!(
            err(b"3\r\nabcX\r\n"),
            "invalid chunked body: a chunk's data is not followed by CRLF"
        );
        assert_eq!(
            err(b"3\nabc"),
            "invalid chunked body: a bare LF in a chunk-size line"
        );
        let long = format!("1;{}", "e".repeat(MAX_CHUNK_LINE));
        assert_eq!(
            decode_in_steps(Framing::Chunked, long.as_bytes(), 1)
                .unwrap_err()
                .to_string(),
            "invalid chunked body: a chunk-size line longer than 4096 bytes"
        );
        let trailers = format!("0\r\n{}", "t: v\r\n".repeat(MAX_TRAILERS / 6 + 1));
        assert_eq!(
            decode_in_steps(Framing::Chunked, trailers.as_bytes(), 7)
                .unwrap_err()
                .to_string(),
            "invalid chunked body: a trailer section longer than 16384 bytes"
        );
    }

    #[test]
    fn the_end_of_the_connection_ends_only_close_delimited_bodies() {
        let mut close = BodyDecoder::new(Framing::Close);
        assert_eq!(close.at_eof(), Ok(()));
        assert!(close.is_done());
        let mut length = BodyDecoder::new(Framing::Length(10));
        let mut buf = BytesMut::from(&b"abc"[..]);
        let _ = length.decode(&mut buf);
        assert_eq!(
            length.at_eof().unwrap_err().to_string(),
            "the connection closed 7 bytes before the end of the body"
        );
        assert_eq!(
            BodyDecoder::new(Framing::Chunked)
                .at_eof()
                .unwrap_err()
                .to_string(),
            "the connection closed before the chunked body's last chunk"
        );
    }

    #[test]
    fn an_emptied_buffer_keeps_no_memory() {
        let mut decoder = BodyDecoder::new(Framing::Close);
        let mut buf = BytesMut::with_capacity(8192);
        buf.extend_from_slice(b"data");
        let _ = decoder.decode(&mut buf);
        assert_eq!(buf.capacity(), 0);
    }
}
