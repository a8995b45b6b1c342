//! Upstream HTTP/1.1 responses: any bytes are a head and a body, an incomplete one, or an
//! error, never a panic; and the body decodes the same whether it arrives whole or in pieces.
#![no_main]

use bytes::BytesMut;
use http::Method;
use libfuzzer_sys::fuzz_target;
use rebound_runtime::http::h1::wire::{BodyDecoder, Decoded, parse_response_head};

/// The body of `wire` fed in pieces of `step` bytes: the pieces, joined, and how it ended.
fn decode(decoder: &mut BodyDecoder, wire: &[u8], step: usize) -> (Vec<u8>, Option<bool>) {
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    for piece in wire.chunks(step) {
        buf.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Decoded::Data(data)) => {
                    assert!(!data.is_empty());
                    body.extend_from_slice(&data);
                }
                Ok(Decoded::NeedMore) => break,
                Ok(Decoded::End) => return (body, Some(true)),
                Err(_) => return (body, Some(false)),
            }
        }
    }
    (body, None)
}

fuzz_target!(|data: &[u8]| {
    let step = data.first().map_or(1, |b| usize::from(*b % 16) + 1);
    let Ok(Some((head, len))) = parse_response_head(data) else {
        return;
    };
    assert!(len <= data.len());
    let Ok(framing) = head.framing(&Method::POST) else {
        return;
    };
    let _ = head.keep_alive();
    let rest = &data[len..];
    let whole = decode(&mut BodyDecoder::new(framing), rest, rest.len().max(1));
    let pieces = decode(&mut BodyDecoder::new(framing), rest, step);
    assert_eq!(whole, pieces);
});
