//! Which of many timed things (a server's connections, a relay's matches)
//! have something due, so a wake-up's work grows with what is due and not
//! with how many things exist.
//!
//! A relay holds thousands of connections and matches, and on any one
//! wake-up only a few have a timer that fired. Asking every one on every
//! wake-up (as the transport server and the relay's router once did) made
//! the per-wake-up cost grow with the load, not with the work: about a third
//! of the relay's CPU at 512 matches. The schedule keeps each key's next
//! deadline (its owner's `poll_timeout`, recomputed by the owner after every
//! call that changes it) in deadline order, and the keys whose deadline has
//! come in key order, so a timer pass, a transmit round robin and a
//! `poll_timeout` touch only those.
//!
//! Exactness is the owner's duty: a key's deadline must depend only on state
//! the owner changes through calls it reschedules after.

use crate::idhash::IdMap;
use crate::time::Instant;
use std::collections::BTreeMap;
use std::hash::Hash;
use std::ops::Bound;

/// A key of a [`Schedule`]: ordered (the due keys' order, and ties between
/// equal deadlines), copied, hashed.
pub trait ScheduleKey: Ord + Copy + Hash {}

/// Position of an entry that is not in the heap (it is due).
const DUE: u32 = u32::MAX;

/// One scheduled key.
#[derive(Clone, Copy, Debug)]
struct Entry<K> {
    key: K,
    at: Instant,
    /// Its index in `pending`, or [`DUE`].
    pos: u32,
}

/// Deadlines by time, and the keys already due: use it for anything with
/// many timers of which few fire per wake-up (see the module docs).
///
/// The deadlines not yet come are a binary min-heap that knows where each
/// entry sits, so moving a deadline (what owners do after nearly every
/// call: a few times per datagram on a relay) is a short sift in one
/// array, not a removal and an insertion in a tree of every key (that
/// was 14 % of a loaded relay's instructions). The keys already due are
/// few (those whose timer fired and whose owner has not run yet) and
/// stay in key order for the transmit round robin.
#[derive(Debug)]
pub struct Schedule<K> {
    /// Each scheduled key's entry (an index into `entries`), looked up on
    /// every change: the id hasher (keys are ids the owner assigned, see
    /// [`crate::idhash`]).
    index: IdMap<K, u32>,
    entries: Vec<Entry<K>>,
    /// Indices of `entries` free for reuse.
    free: Vec<u32>,
    /// Entries whose deadline is after `now`, a min-heap by (deadline,
    /// key), each with its entry's index: a sift compares neighbours in
    /// this one array instead of looking each up in `entries`.
    pending: Vec<(Instant, K, u32)>,
    /// Keys whose deadline is at or before `now`, in key order, with it.
    due: BTreeMap<K, Instant>,
    /// The latest time the schedule was told.
    now: Instant,
}

impl<K: ScheduleKey> Schedule<K> {
    /// Sets `id`'s deadline (`None`: nothing will ever be due, e.g. closed).
    pub fn set(&mut self, id: K, at: Option<Instant>) {
        match (self.index.get(&id).copied(), at) {
            (None, None) => {}
            (Some(e), None) => {
                self.index.remove(&id);
                self.unfile(e);
                self.free.push(e);
            }
            (None, Some(t)) => {
                let entry = Entry {
                    key: id,
                    at: t,
                    pos: DUE,
                };
                let e = match self.free.pop() {
                    Some(e) => {
                        self.entries[e as usize] = entry;
                        e
                    }
                    None => {
                        self.entries.push(entry);
                        u32::try_from(self.entries.len() - 1).unwrap_or(u32::MAX)
                    }
                };
                self.index.insert(id, e);
                self.file(e);
            }
            (Some(e), Some(t)) => {
                let entry = &mut self.entries[e as usize];
                let old = entry.at;
                if old == t {
                    return;
                }
                entry.at = t;
                let pos = entry.pos;
                match (pos == DUE, t <= self.now) {
                    (true, true) => {
                        self.due.insert(id, t);
                    }
                    (true, false) => {
                        self.due.remove(&id);
                        self.push(e);
                    }
                    (false, true) => {
                        self.heap_remove(pos as usize);
                        self.due.insert(id, t);
                    }
                    (false, false) => {
                        self.pending[pos as usize].0 = t;
                        if t < old {
                            self.sift_up(pos as usize);
                        } else {
                            self.sift_down(pos as usize);
                        }
                    }
                }
            }
        }
    }

    /// Forgets `id` (its owner is gone).
    pub fn remove(&mut self, id: K) {
        self.set(id, None);
    }

    /// Moves the clock to `now` (never back): deadlines passed meanwhile become due.
    pub fn advance(&mut self, now: Instant) {
        if now <= self.now {
            return;
        }
        self.now = now;
        while let Some(&(at, key, _)) = self.pending.first() {
            if at > now {
                break;
            }
            self.heap_remove(0);
            self.due.insert(key, at);
        }
    }

    /// The latest time the schedule was told.
    #[must_use]
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The earliest deadline of any key.
    #[must_use]
    pub fn first(&self) -> Option<Instant> {
        let pending = self.pending.first().map(|&(at, _, _)| at);
        // The due keys are few (their owners run on the next wake-up).
        let due = self.due.values().min().copied();
        match (due, pending) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// How many keys are due.
    #[must_use]
    pub fn due_len(&self) -> usize {
        self.due.len()
    }

    /// The due keys, in key order.
    pub fn due(&self) -> impl Iterator<Item = K> + '_ {
        self.due.keys().copied()
    }

    /// The first due key strictly after `after` in key order, wrapping
    /// around to the first one (`after` need not be due, or exist).
    #[must_use]
    pub fn due_after(&self, after: Option<K>) -> Option<K> {
        after
            .and_then(|c| {
                self.due
                    .range((Bound::Excluded(c), Bound::Unbounded))
                    .next()
            })
            .or_else(|| self.due.first_key_value())
            .map(|(&k, _)| k)
    }

    /// The deadline recorded for `id` (owners check it against their own in tests).
    #[must_use]
    pub fn deadline_of(&self, id: K) -> Option<Instant> {
        let e = *self.index.get(&id)?;
        Some(self.entries[e as usize].at)
    }

    /// Whether `id` is in the due set.
    #[must_use]
    pub fn is_due(&self, id: K) -> bool {
        self.due.contains_key(&id)
    }

    /// How many keys have a deadline.
    #[must_use]
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no key has a deadline.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Files entry `e` by its deadline: due, or in the heap.
    fn file(&mut self, e: u32) {
        let entry = self.entries[e as usize];
        if entry.at <= self.now {
            self.due.insert(entry.key, entry.at);
        } else {
            self.push(e);
        }
    }

    /// Takes entry `e` out of wherever it is filed.
    fn unfile(&mut self, e: u32) {
        let entry = self.entries[e as usize];
        if entry.pos == DUE {
            self.due.remove(&entry.key);
        } else {
            self.heap_remove(entry.pos as usize);
        }
    }

    /// Whether the entry at heap position `a` comes before the one at `b`.
    fn before(&self, a: usize, b: usize) -> bool {
        let (x, y) = (&self.pending[a], &self.pending[b]);
        (x.0, x.1) < (y.0, y.1)
    }

    fn place(&mut self, pos: usize) {
        let e = self.pending[pos].2;
        self.entries[e as usize].pos = u32::try_from(pos).unwrap_or(DUE);
    }

    fn push(&mut self, e: u32) {
        let entry = self.entries[e as usize];
        self.pending.push((entry.at, entry.key, e));
        self.sift_up(self.pending.len() - 1);
    }

    /// Removes the heap entry at `pos` (its entry is marked due).
    fn heap_remove(&mut self, pos: usize) {
        let (_, _, e) = self.pending.swap_remove(pos);
        self.entries[e as usize].pos = DUE;
        if pos < self.pending.len() {
            self.place(pos);
            self.sift_down(pos);
            self.sift_up(pos);
        }
    }

    fn sift_up(&mut self, mut pos: usize) {
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if !self.before(pos, parent) {
                break;
            }
            self.pending.swap(pos, parent);
            self.place(pos);
            pos = parent;
        }
        self.place(pos);
    }

    fn sift_down(&mut self, mut pos: usize) {
        let n = self.pending.len();
        loop {
            let (l, r) = (2 * pos + 1, 2 * pos + 2);
            let mut least = pos;
            if l < n && self.before(l, least) {
                least = l;
            }
            if r < n && self.before(r, least) {
                least = r;
            }
            if least == pos {
                break;
            }
            self.pending.swap(pos, least);
            self.place(pos);
            pos = least;
        }
        self.place(pos);
    }
}

impl<K: ScheduleKey> Default for Schedule<K> {
    fn default() -> Self {
        Self {
            index: IdMap::default(),
            entries: Vec::new(),
            free: Vec::new(),
            pending: Vec::new(),
            due: BTreeMap::new(),
            now: Instant::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Duration;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    struct ConnId(u32);
    impl ScheduleKey for ConnId {}

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn deadlines_become_due_when_the_clock_reaches_them_and_not_before() {
        let mut s = Schedule::<ConnId>::default();
        s.set(ConnId(1), Some(at(10)));
        s.set(ConnId(2), Some(at(20)));
        s.set(ConnId(3), None);
        assert_eq!(s.first(), Some(at(10)));
        assert_eq!(s.due_len(), 0);
        s.advance(at(10));
        assert_eq!(s.due().collect::<Vec<_>>(), [ConnId(1)]);
        s.advance(at(19));
        assert_eq!(s.due_len(), 1);
        s.advance(at(25));
        assert_eq!(s.due().collect::<Vec<_>>(), [ConnId(1), ConnId(2)]);
        // Pushed back past now: no longer due; cleared: gone everywhere.
        s.set(ConnId(1), Some(at(30)));
        s.remove(ConnId(2));
        assert_eq!(s.due_len(), 0);
        assert_eq!(s.first(), Some(at(30)));
        assert_eq!(s.len(), 1);
        // A deadline already passed is due at once.
        s.set(ConnId(4), Some(at(5)));
        assert!(s.is_due(ConnId(4)));
        assert_eq!(s.first(), Some(at(5)));
    }

    #[test]
    fn the_round_robin_wraps_and_skips_connections_not_due() {
        let mut s = Schedule::<ConnId>::default();
        for id in [1, 3, 5] {
            s.set(ConnId(id), Some(at(0)));
        }
        s.set(ConnId(4), Some(at(100)));
        assert_eq!(s.due_after(None), Some(ConnId(1)));
        assert_eq!(s.due_after(Some(ConnId(1))), Some(ConnId(3)));
        assert_eq!(s.due_after(Some(ConnId(3))), Some(ConnId(5)));
        assert_eq!(s.due_after(Some(ConnId(5))), Some(ConnId(1)));
        // A cursor naming a connection that is gone or not due.
        assert_eq!(s.due_after(Some(ConnId(2))), Some(ConnId(3)));
        assert_eq!(s.due_after(Some(ConnId(9))), Some(ConnId(1)));
    }

    #[test]
    fn any_sequence_of_changes_agrees_with_a_plain_sorted_model() {
        // A heap that knows its entries' positions is easy to get subtly
        // wrong (a stale position after a swap): drive it with random
        // sets, clears and clock moves over few keys (so entries are
        // reused and deadlines tie) and compare every answer with a model
        // that sorts everything on each question.
        let mut rng = crate::rng::Rng::new(7);
        let mut s = Schedule::<ConnId>::default();
        let mut model = std::collections::BTreeMap::<ConnId, Instant>::new();
        let mut now = Instant::ZERO;
        for step in 0..20_000 {
            let id = ConnId(u32::try_from(rng.below(40)).unwrap());
            match rng.below(10) {
                0 => {
                    s.remove(id);
                    model.remove(&id);
                }
                1 => {
                    now += Duration::from_micros(rng.below(3_000));
                    s.advance(now);
                }
                _ => {
                    // From 1 ms ago (due at once) to 4 ms ahead.
                    let t = Instant::from_micros(
                        (now.as_micros() + rng.below(5_000)).saturating_sub(1_000),
                    );
                    s.set(id, Some(t));
                    model.insert(id, t);
                }
            }
            let due: Vec<ConnId> = model
                .iter()
                .filter(|(_, t)| **t <= now)
                .map(|(k, _)| *k)
                .collect();
            assert_eq!(s.due().collect::<Vec<_>>(), due, "due keys at step {step}");
            assert_eq!(
                s.first(),
                model.values().min().copied(),
                "first at step {step}"
            );
            assert_eq!(s.len(), model.len());
            for (&k, &t) in &model {
                assert_eq!(s.deadline_of(k), Some(t));
            }
        }
    }
}
