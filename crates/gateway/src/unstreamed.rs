//! Candidates that answer stream requests whole, learned from their answers.
//!
//! A server that does not stream sends its headers only with the whole answer, after the whole
//! generation. A stream request waits `stream_first_byte_ms` (60 s) for a stream's headers,
//! which such a server never sends sooner: every answer longer than that would be abandoned,
//! and asked for again from the start. Once a candidate has answered a stream request whole,
//! its stream requests wait for headers as long as a request that does not stream does
//! (`first_byte_ms`), until it streams again. This instance learns it alone: the first answer
//! on each instance is told under the stream's timeout.

use std::collections::HashSet;
use std::sync::{PoisonError, RwLock};

/// The ids of the candidates whose last answer to a stream request came whole.
#[derive(Debug, Default)]
pub(crate) struct Unstreamed {
    ids: RwLock<HashSet<Box<str>>>,
}

impl Unstreamed {
    /// Whether `candidate`'s last answer to a stream request came whole.
    pub(crate) fn knows(&self, candidate: &str) -> bool {
        let ids = self.ids.read().unwrap_or_else(PoisonError::into_inner);
        !ids.is_empty() && ids.contains(candidate)
    }

    /// `candidate` answered a stream request whole (`true`) or streamed (`false`); true when
    /// this changes what is known of it.
    pub(crate) fn answered(&self, candidate: &str, whole: bool) -> bool {
        if self.knows(candidate) == whole {
            return false;
        }
        let mut ids = self.ids.write().unwrap_or_else(PoisonError::into_inner);
        if whole {
            ids.insert(candidate.into())
        } else {
            ids.remove(candidate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidate_is_known_from_its_whole_answer_until_it_streams_again() {
        let known = Unstreamed::default();
        assert!(!known.knows("local"));
        assert!(!known.answered("local", false), "a stream changes nothing");
        assert!(known.answered("local", true));
        assert!(!known.answered("local", true), "learned once");
        assert!(known.knows("local") && !known.knows("openai"));
        assert!(known.answered("local", false));
        assert!(!known.knows("local"));
    }
}
