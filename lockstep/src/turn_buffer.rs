//! Bundles received from the relay, held until their turn is simulated:
//! duplicates and stale ones are dropped, far-future ones refused, so a
//! session yields every turn exactly once and in order.

use crate::proto::Bundle;
use sim::Turn;
use std::collections::BTreeMap;

/// How far ahead of the next turn to simulate a bundle may be buffered.
pub const MAX_BUFFERED_AHEAD: u32 = 512;

/// Why a bundle was not buffered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its turn was already simulated.
    Stale,
    /// A bundle for that turn is already buffered.
    Duplicate,
    /// Too far ahead of the next turn to simulate.
    TooFar,
}

/// The received, not yet simulated bundles.
#[derive(Debug, Default)]
pub(crate) struct TurnBuffer {
    bundles: BTreeMap<Turn, Bundle>,
}

impl TurnBuffer {
    /// Buffers `bundle` given that `next` is the next turn to simulate.
    pub(crate) fn insert(&mut self, next: Turn, bundle: Bundle) -> Result<(), Refused> {
        if bundle.turn < next {
            return Err(Refused::Stale);
        }
        if bundle.turn.0 - next.0 > MAX_BUFFERED_AHEAD {
            return Err(Refused::TooFar);
        }
        if self.bundles.contains_key(&bundle.turn) {
            return Err(Refused::Duplicate);
        }
        self.bundles.insert(bundle.turn, bundle);
        Ok(())
    }

    /// Whether the bundle for `turn` is here.
    #[must_use]
    pub(crate) fn has(&self, turn: Turn) -> bool {
        self.bundles.contains_key(&turn)
    }

    /// Removes and returns the bundle for `turn`.
    pub(crate) fn take(&mut self, turn: Turn) -> Option<Bundle> {
        self.bundles.remove(&turn)
    }

    /// Whether nothing is buffered.
    #[must_use]
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.bundles.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(t: u32) -> Bundle {
        Bundle {
            turn: Turn(t),
            inputs: Vec::new(),
            notices: Vec::new(),
            tag: None,
        }
    }

    #[test]
    fn refuses_stale_duplicate_and_far() {
        let mut buf = TurnBuffer::default();
        assert_eq!(buf.insert(Turn(5), b(4)), Err(Refused::Stale));
        assert_eq!(buf.insert(Turn(5), b(7)), Ok(()));
        assert_eq!(buf.insert(Turn(5), b(7)), Err(Refused::Duplicate));
        assert_eq!(
            buf.insert(Turn(5), b(5 + MAX_BUFFERED_AHEAD + 1)),
            Err(Refused::TooFar)
        );
        assert!(!buf.has(Turn(5)));
        assert!(buf.take(Turn(7)).is_some());
        assert!(buf.is_empty());
    }
}
