//! SSE framing and every API's stream items (the commit-point detection), fed in two
//! pieces split anywhere.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rebound_runtime::Api;
use rebound_runtime::provider::stream_items;
use rebound_runtime::sse::SseFramer;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    let mut framer = SseFramer::new();
    let mut last_end = 0;
    for chunk in [&data[..split], &data[split..]] {
        let Ok(events) = framer.push(chunk) else { return };
        for event in events {
            assert!(event.end >= last_end && event.end <= data.len() as u64);
            last_end = event.end;
            for api in [Api::ChatCompletions, Api::Responses, Api::Messages] {
                for item in stream_items(api, &event.event, &event.data) {
                    let _ = item.is_content();
                }
            }
        }
    }
});
