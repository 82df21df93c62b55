//! What event loops hand each other: datagrams that arrived on the wrong
//! loop's socket, connections moving to the loop that hosts their match,
//! and routing updates, through bounded mailboxes. Which loop hosts a match
//! is a pure function of its name and the relay's placement key
//! ([`home_of`]), so no loop has to ask another.

use crate::limits::TokenBucket;
use crossbeam_channel::{Receiver, Sender, TrySendError};
use lockstep::low_level::transport::Detached;
use mio::Waker;
use std::net::SocketAddr;
use std::sync::Arc;

/// Datagram batches and routes a loop's mailbox holds. A loop posts at
/// most one batch of datagrams to each other loop per wake-up (at most one
/// a millisecond), and a receiving loop empties its mailbox at every
/// wake-up, so this is about a second of a busy sender's batches: a mailbox
/// fills only when its loop is wedged, and then what does not fit is
/// dropped (and counted) instead of piling up in memory. Connections moving
/// to their match's loop have room of their own on top, as many as the
/// relay admits (each moves at most once): a join burst of thousands of
/// peers, half of them landing on the other loop, must not lose players
/// (the capacity bench lost 592 of 6,144 peers at 1,536 matches on two
/// loops when they shared these 1,024 places).
pub(crate) const MAILBOX: usize = 1024;

/// The loop (of `loops`) that hosts the match named `name`: a keyed hash
/// (BLAKE3 keyed with `key`) of the name, so every loop computes the same
/// answer with no shared state, and, with a key nobody outside the relay
/// knows (`relay serve` draws one from the OS CSPRNG at start-up), clients
/// cannot pick names that put every match on one loop.
#[must_use]
pub fn home_of(name: &str, loops: usize, key: &[u8; 32]) -> usize {
    let h = blake3::keyed_hash(key, name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&h.as_bytes()[..8]);
    usize::try_from(u64::from_le_bytes(first) % loops.max(1) as u64).unwrap_or(0)
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
    /// Datagrams that landed on loop `from`'s socket, for connections the
    /// receiving loop serves.
    Datagrams { from: usize, batch: Forwarded },
    /// A connection joining a match the receiving loop hosts. `landing` is
    /// the loop whose socket the client's datagrams arrive on; `budget` what
    /// is left of its rate budget (it follows the connection).
    Conn {
        moved: Detached,
        landing: usize,
        budget: Option<TokenBucket>,
    },
    /// To a landing loop, from the loop serving `addr`: datagrams from
    /// `addr` now go to loop `to` (`None`: serve them yourself again).
    Route { addr: SocketAddr, to: Option<usize> },
}

/// The way to one loop: its bounded inbox and its waker.
#[derive(Clone)]
pub(crate) struct Mailbox {
    pub(crate) tx: Sender<Handoff>,
    pub(crate) waker: Arc<Waker>,
}

impl Mailbox {
    /// Delivers `h` and wakes the loop; hands `h` back when the mailbox is
    /// full (its loop is far behind) or gone (it has exited, at shutdown).
    pub(crate) fn post(&self, h: Handoff) -> Result<(), Handoff> {
        // Datagrams get `MAILBOX` places; the rest is the connections'.
        if matches!(h, Handoff::Datagrams { .. }) && self.tx.len() >= MAILBOX {
            return Err(h);
        }
        match self.tx.try_send(h) {
            Ok(()) => {
                let _ = self.waker.wake();
                Ok(())
            }
            Err(TrySendError::Full(h) | TrySendError::Disconnected(h)) => Err(h),
        }
    }

    /// Wakes the loop with nothing to read (it re-checks the shutdown state).
    pub(crate) fn wake(&self) {
        let _ = self.waker.wake();
    }
}

/// A loop's own end of the mail.
pub(crate) type Inbox = Receiver<Handoff>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_match_name_always_has_the_same_home_and_names_spread_over_loops() {
        let key = [7; 32];
        assert_eq!(home_of("duel", 1, &key), 0);
        assert_eq!(home_of("duel", 4, &key), home_of("duel", 4, &key));
        let homes: std::collections::BTreeSet<usize> = (0..64)
            .map(|i| home_of(&format!("m{i}"), 4, &key))
            .collect();
        assert_eq!(homes.len(), 4, "64 names reach all 4 loops");
    }

    /// Names a client picked to share one home under one key are spread
    /// over the loops under another: without the key, a client cannot
    /// put every match on one loop.
    #[test]
    fn names_that_share_a_home_under_one_key_spread_under_another() {
        let pinned: Vec<String> = (0..)
            .map(|i| format!("m{i}"))
            .filter(|n| home_of(n, 4, &[1; 32]) == 0)
            .take(64)
            .collect();
        let homes: std::collections::BTreeSet<usize> =
            pinned.iter().map(|n| home_of(n, 4, &[2; 32])).collect();
        assert_eq!(homes.len(), 4, "{homes:?}");
    }

    #[test]
    fn a_full_mailbox_hands_the_message_back() {
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), mio::Token(1)).unwrap());
        let (tx, rx) = crossbeam_channel::bounded(MAILBOX);
        let mail = Mailbox { tx, waker };
        let route = || Handoff::Route {
            addr: SocketAddr::from(([127, 0, 0, 1], 1)),
            to: None,
        };
        for _ in 0..MAILBOX {
            assert!(mail.post(route()).is_ok());
        }
        assert!(matches!(mail.post(route()), Err(Handoff::Route { .. })));
        assert_eq!(rx.len(), MAILBOX);
    }

    /// Datagram batches fill only their `MAILBOX` places: the room beyond is
    /// kept for connections (and routes), so a flood of forwarded datagrams
    /// cannot make the relay lose a player moving to its match's loop.
    #[test]
    fn datagrams_cannot_take_the_places_kept_for_connections() {
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), mio::Token(1)).unwrap());
        let (tx, rx) = crossbeam_channel::bounded(MAILBOX + 4);
        let mail = Mailbox { tx, waker };
        let datagrams = || Handoff::Datagrams {
            from: 1,
            batch: Forwarded::default(),
        };
        for _ in 0..MAILBOX {
            assert!(mail.post(datagrams()).is_ok());
        }
        assert!(matches!(
            mail.post(datagrams()),
            Err(Handoff::Datagrams { .. })
        ));
        let route = Handoff::Route {
            addr: SocketAddr::from(([127, 0, 0, 1], 1)),
            to: None,
        };
        assert!(mail.post(route).is_ok());
        assert_eq!(rx.len(), MAILBOX + 1);
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
