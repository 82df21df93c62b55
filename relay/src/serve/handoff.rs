//! What event loops hand each other: datagrams that arrived on the wrong
//! loop's socket, connections moving to the loop that hosts their match,
//! and routing updates. Which loop hosts a match is a pure function of its
//! name ([`home_of`]), so no loop has to ask another.

use crossbeam_channel::{Receiver, Sender};
use lockstep::transport::Detached;
use mio::Waker;
use std::net::SocketAddr;
use std::sync::Arc;

/// The loop (of `loops`) that hosts the match named `name`: FNV-1a of the
/// name, so every loop computes the same answer with no shared state.
#[must_use]
pub fn home_of(name: &str, loops: usize) -> usize {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    usize::try_from(h % loops.max(1) as u64).unwrap_or(0)
}

/// Datagrams one loop received for addresses another loop serves, sent
/// once per wake-up: one buffer for all of them, not one per datagram.
#[derive(Debug, Default)]
pub(crate) struct Forwarded {
    pub(crate) bytes: Vec<u8>,
    pub(crate) items: Vec<(SocketAddr, usize)>,
}

impl Forwarded {
    pub(crate) fn push(&mut self, from: SocketAddr, d: &[u8]) {
        self.bytes.extend_from_slice(d);
        self.items.push((from, d.len()));
    }

    /// Each datagram with its sender, in arrival order.
    pub(crate) fn each(&self, mut f: impl FnMut(SocketAddr, &[u8])) {
        let mut at = 0;
        for &(from, len) in &self.items {
            if let Some(d) = self.bytes.get(at..at + len) {
                f(from, d);
            }
            at += len;
        }
    }
}

/// One message between loops.
#[derive(Debug)]
pub(crate) enum Handoff {
    /// Datagrams for connections the receiving loop serves.
    Datagrams(Forwarded),
    /// A connection joining a match the receiving loop hosts. `landing` is
    /// the loop whose socket the client's datagrams arrive on.
    Conn { moved: Detached, landing: usize },
    /// To a landing loop: datagrams from `addr` now go to loop `to`
    /// (`None`: serve them yourself again).
    Route { addr: SocketAddr, to: Option<usize> },
    /// Every loop has finished: stop.
    Wake,
}

/// The way to one loop: its inbox and its waker.
#[derive(Clone)]
pub(crate) struct Mailbox {
    pub(crate) tx: Sender<Handoff>,
    pub(crate) waker: Arc<Waker>,
}

impl Mailbox {
    /// Delivers `h` and wakes the loop. A loop that has already exited
    /// drops it (only possible at shutdown).
    pub(crate) fn post(&self, h: Handoff) {
        if self.tx.send(h).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

/// A loop's own end of the mail.
pub(crate) type Inbox = Receiver<Handoff>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_match_name_always_has_the_same_home_and_names_spread_over_loops() {
        assert_eq!(home_of("duel", 1), 0);
        assert_eq!(home_of("duel", 4), home_of("duel", 4));
        let homes: std::collections::BTreeSet<usize> =
            (0..64).map(|i| home_of(&format!("m{i}"), 4)).collect();
        assert_eq!(homes.len(), 4, "64 names reach all 4 loops");
    }

    #[test]
    fn forwarded_datagrams_come_out_in_order_with_their_senders() {
        let a = SocketAddr::from(([127, 0, 0, 1], 1));
        let b = SocketAddr::from(([127, 0, 0, 1], 2));
        let mut f = Forwarded::default();
        f.push(a, b"one");
        f.push(b, b"");
        f.push(a, b"three");
        let mut seen = Vec::new();
        f.each(|from, d| seen.push((from, d.to_vec())));
        assert_eq!(
            seen,
            vec![
                (a, b"one".to_vec()),
                (b, Vec::new()),
                (a, b"three".to_vec())
            ]
        );
    }
}
