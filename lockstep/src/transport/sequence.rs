//! Wraparound-aware 16-bit sequence numbers and the fixed-size ring buffer
//! indexed by them (Gaffer's "sequence buffer"), used for sent and received
//! packet records.

pub(crate) use crate::wire::sequence_greater_than;
use smallvec::SmallVec;

/// What an insert pushed out of the buffer: usually nothing or one slot
/// (inline, no allocation); a jump forward may clear more.
pub(crate) type Evicted<T> = SmallVec<[(u16, T); 1]>;

/// `a < b` with wraparound.
#[must_use]
#[cfg(test)]
pub(crate) const fn sequence_less_than(a: u16, b: u16) -> bool {
    sequence_greater_than(b, a)
}

/// A fixed-capacity map from recent sequence numbers to values: slot `seq % N`,
/// tagged with the full sequence so stale slots never answer for newer numbers.
#[derive(Clone, Debug)]
pub(crate) struct SequenceBuffer<T> {
    slots: Box<[Option<(u16, T)>]>,
    newest: Option<u16>,
}

/// Why an insert was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TooOld;

impl<T> SequenceBuffer<T> {
    /// A buffer with `size` slots; `size` must be a power of two no larger than 32768.
    #[must_use]
    pub(crate) fn new(size: usize) -> Self {
        assert!(
            size.is_power_of_two() && size <= 32768,
            "bad sequence buffer size"
        );
        Self {
            slots: (0..size).map(|_| None).collect(),
            newest: None,
        }
    }

    /// Number of slots.
    #[must_use]
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The newest sequence inserted.
    #[must_use]
    pub(crate) fn newest(&self) -> Option<u16> {
        self.newest
    }

    fn index(&self, seq: u16) -> usize {
        usize::from(seq) % self.slots.len()
    }

    /// Stores `value` under `seq`. Moving `newest` forward clears the slots skipped
    /// over; returns whatever lived in a slot being reused so callers can account
    /// for it. Sequences older than the window are refused.
    pub(crate) fn insert(&mut self, seq: u16, value: T) -> Result<Evicted<T>, TooOld> {
        let mut evicted = Evicted::new();
        match self.newest {
            Some(newest) if sequence_greater_than(seq, newest) => {
                let gap = usize::from(seq.wrapping_sub(newest));
                // Clear every slot from newest+1 up to (and including) seq.
                for k in 1..=gap.min(self.slots.len()) {
                    let s = newest.wrapping_add(k as u16);
                    let i = self.index(s);
                    if let Some(old) = self.slots[i].take() {
                        evicted.push(old);
                    }
                }
                self.newest = Some(seq);
            }
            Some(newest) => {
                if usize::from(newest.wrapping_sub(seq)) >= self.slots.len() {
                    return Err(TooOld);
                }
                let i = self.index(seq);
                if let Some(old) = self.slots[i].take() {
                    evicted.push(old);
                }
            }
            None => self.newest = Some(seq),
        }
        let i = self.index(seq);
        self.slots[i] = Some((seq, value));
        Ok(evicted)
    }

    /// The value stored for exactly `seq`.
    #[must_use]
    pub(crate) fn get(&self, seq: u16) -> Option<&T> {
        match &self.slots[self.index(seq)] {
            Some((s, v)) if *s == seq => Some(v),
            _ => None,
        }
    }

    /// Mutable access to the value stored for exactly `seq`.
    pub(crate) fn get_mut(&mut self, seq: u16) -> Option<&mut T> {
        let i = self.index(seq);
        match &mut self.slots[i] {
            Some((s, v)) if *s == seq => Some(v),
            _ => None,
        }
    }

    /// Whether `seq` is stored.
    #[must_use]
    #[cfg(test)]
    pub(crate) fn contains(&self, seq: u16) -> bool {
        self.get(seq).is_some()
    }

    /// Removes and returns the value for `seq`.
    #[cfg(test)]
    pub(crate) fn remove(&mut self, seq: u16) -> Option<T> {
        let i = self.index(seq);
        match &self.slots[i] {
            Some((s, _)) if *s == seq => self.slots[i].take().map(|(_, v)| v),
            _ => None,
        }
    }

    /// Changes the number of slots to `size` (a power of two no larger than
    /// 32768), keeping the values of the newest `size` sequences: a buffer
    /// sized to what is in use rather than to the largest window it may need.
    pub(crate) fn resize(&mut self, size: usize) {
        assert!(
            size.is_power_of_two() && size <= 32768,
            "bad sequence buffer size"
        );
        if size == self.slots.len() {
            return;
        }
        let mut slots: Box<[Option<(u16, T)>]> = (0..size).map(|_| None).collect();
        let newest = self.newest;
        for (s, v) in self.slots.iter_mut().filter_map(Option::take) {
            if newest.is_some_and(|n| usize::from(n.wrapping_sub(s)) < size) {
                slots[usize::from(s) % size] = Some((s, v));
            }
        }
        self.slots = slots;
    }

    /// Bytes of the slots on the heap (not any heap the values own).
    #[must_use]
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of_val::<[Option<(u16, T)>]>(&self.slots)
    }
}

/// One bit for each of the last `64 * W` sequences up to the newest: a set
/// of recent sequence numbers (packets received, packets acked) at a bit
/// apiece where a [`SequenceBuffer`] slot would take a word or more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SeqBits<const W: usize> {
    words: [u64; W],
    newest: Option<u16>,
}

impl<const W: usize> Default for SeqBits<W> {
    fn default() -> Self {
        Self {
            words: [0; W],
            newest: None,
        }
    }
}

impl<const W: usize> SeqBits<W> {
    /// Sequences covered, the newest included.
    pub(crate) const WINDOW: usize = 64 * W;

    /// The newest sequence the window was moved to.
    #[must_use]
    pub(crate) fn newest(&self) -> Option<u16> {
        self.newest
    }

    /// Whether `seq` is no newer than the newest and fewer than
    /// [`Self::WINDOW`] behind it.
    #[must_use]
    pub(crate) fn in_window(&self, seq: u16) -> bool {
        self.newest.is_some_and(|n| {
            !sequence_greater_than(seq, n) && usize::from(n.wrapping_sub(seq)) < Self::WINDOW
        })
    }

    fn bit(seq: u16) -> (usize, u64) {
        let i = usize::from(seq) % Self::WINDOW;
        (i / 64, 1 << (i % 64))
    }

    /// Whether `seq` is in the window and set.
    #[must_use]
    pub(crate) fn contains(&self, seq: u16) -> bool {
        let (w, b) = Self::bit(seq);
        self.in_window(seq) && self.words[w] & b != 0
    }

    /// Makes a newer `seq` the newest, clearing the bits of the sequences
    /// it pushes out of the window; returns how many of those were set.
    /// An older `seq` changes nothing.
    pub(crate) fn advance(&mut self, seq: u16) -> u32 {
        let gap = match self.newest {
            Some(n) if sequence_greater_than(seq, n) => usize::from(seq.wrapping_sub(n)),
            Some(_) => return 0,
            None => Self::WINDOW,
        };
        self.newest = Some(seq);
        if gap >= Self::WINDOW {
            let dropped = self.words.iter().map(|w| w.count_ones()).sum();
            self.words = [0; W];
            return dropped;
        }
        let mut dropped = 0;
        for k in 0..gap {
            let (w, b) = Self::bit(seq.wrapping_sub(k as u16));
            dropped += u32::from(self.words[w] & b != 0);
            self.words[w] &= !b;
        }
        dropped
    }

    /// Sets `seq` if it is in the window; whether it was newly set.
    pub(crate) fn insert(&mut self, seq: u16) -> bool {
        let (w, b) = Self::bit(seq);
        if !self.in_window(seq) || self.words[w] & b != 0 {
            return false;
        }
        self.words[w] |= b;
        true
    }

    /// Clears `seq`; whether it was set (and in the window).
    pub(crate) fn remove(&mut self, seq: u16) -> bool {
        let was = self.contains(seq);
        let (w, b) = Self::bit(seq);
        if was {
            self.words[w] &= !b;
        }
        was
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn less_than_mirrors_greater_than() {
        assert!(sequence_less_than(65535, 0));
        assert!(sequence_less_than(0, 1));
        assert!(!sequence_less_than(1, 0));
    }

    #[test]
    fn buffer_wraps_and_refuses_stale_entries() {
        let mut b = SequenceBuffer::new(8);
        for s in 65530u16..=65535 {
            assert!(b.insert(s, u32::from(s)).unwrap().is_empty());
        }
        assert!(b.insert(1, 1).unwrap().is_empty()); // clears slot of 0
        assert_eq!(b.newest(), Some(1));
        assert!(!b.contains(0));
        assert_eq!(b.get(65535), Some(&65535));
        // 65530 shares slot 2 with 2: inserting 2 evicts it.
        assert_eq!(b.insert(2, 2).unwrap().as_slice(), [(65530, 65530)]);
        assert!(!b.contains(65530));
        assert_eq!(b.insert(65529, 0), Err(TooOld));
        assert_eq!(b.remove(1), Some(1));
        assert_eq!(b.remove(1), None);
        // A large jump clears everything.
        let ev = b.insert(1000, 7).unwrap();
        assert_eq!(ev.len(), 6);
        assert_eq!(b.get(1000), Some(&7));
        assert_eq!(b.capacity(), 8);
    }

    #[test]
    fn resizing_keeps_the_newest_values() {
        let mut b = SequenceBuffer::new(4);
        for s in 65533u16..=65535 {
            b.insert(s, s).unwrap();
        }
        b.insert(0, 0).unwrap();
        b.resize(16);
        assert_eq!(b.capacity(), 16);
        assert_eq!(
            b.heap_bytes(),
            16 * std::mem::size_of::<Option<(u16, u16)>>()
        );
        for s in [65533u16, 65534, 65535, 0] {
            assert_eq!(b.get(s), Some(&s));
        }
        // Now 16 values fit: the next 12 evict nothing.
        for s in 1..=12u16 {
            assert!(b.insert(s, s).unwrap().is_empty());
        }
        assert_eq!(b.get(65533), Some(&65533));
        // Shrinking keeps the newest 2 only.
        b.resize(2);
        assert_eq!(b.get(12), Some(&12));
        assert_eq!(b.get(11), Some(&11));
        assert!(!b.contains(10));
        assert_eq!(b.insert(10, 10), Err(TooOld));
    }

    /// The bits answer as a buffer of the same window would, under
    /// reordering, jumps past the window and wraparound.
    #[test]
    fn bits_agree_with_a_sequence_buffer() {
        let mut bits = SeqBits::<2>::default();
        let mut buf = SequenceBuffer::new(SeqBits::<2>::WINDOW);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = 65_000u16;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let seq = match x % 10 {
                0 => next.wrapping_sub((x >> 8) as u16 % 200),
                1 => next.wrapping_add((x >> 8) as u16 % 300),
                _ => next,
            };
            next = next.wrapping_add(1);
            let dropped = bits.advance(seq);
            let evicted = match buf.insert(seq, ()) {
                Ok(ev) => ev.len(),
                Err(TooOld) => 0,
            };
            let inserted = bits.insert(seq);
            // An older `seq` already held: the buffer evicts its old value.
            let replaced = !inserted && bits.contains(seq);
            assert_eq!(dropped as usize + usize::from(replaced), evicted);
            for k in 0..300u16 {
                let s = seq.wrapping_sub(k);
                assert_eq!(bits.contains(s), buf.contains(s), "seq {s}");
            }
        }
        assert!(bits.remove(bits.newest().unwrap()));
        assert!(!bits.remove(bits.newest().unwrap()));
    }
}
