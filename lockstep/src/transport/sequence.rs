//! Wraparound-aware 16-bit sequence numbers and the fixed-size ring buffer
//! indexed by them (Gaffer's "sequence buffer"), used for sent and received
//! packet records.

pub use crate::wire::sequence_greater_than;
use smallvec::SmallVec;

/// What an insert pushed out of the buffer: usually nothing or one slot
/// (inline, no allocation); a jump forward may clear more.
pub type Evicted<T> = SmallVec<[(u16, T); 1]>;

/// `a < b` with wraparound.
#[must_use]
pub const fn sequence_less_than(a: u16, b: u16) -> bool {
    sequence_greater_than(b, a)
}

/// A fixed-capacity map from recent sequence numbers to values: slot `seq % N`,
/// tagged with the full sequence so stale slots never answer for newer numbers.
#[derive(Clone, Debug)]
pub struct SequenceBuffer<T> {
    slots: Box<[Option<(u16, T)>]>,
    newest: Option<u16>,
}

/// Why an insert was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooOld;

impl<T> SequenceBuffer<T> {
    /// A buffer with `size` slots; `size` must be a power of two no larger than 32768.
    #[must_use]
    pub fn new(size: usize) -> Self {
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
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The newest sequence inserted.
    #[must_use]
    pub fn newest(&self) -> Option<u16> {
        self.newest
    }

    fn index(&self, seq: u16) -> usize {
        usize::from(seq) % self.slots.len()
    }

    /// Stores `value` under `seq`. Moving `newest` forward clears the slots skipped
    /// over; returns whatever lived in a slot being reused so callers can account
    /// for it. Sequences older than the window are refused.
    pub fn insert(&mut self, seq: u16, value: T) -> Result<Evicted<T>, TooOld> {
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
    pub fn get(&self, seq: u16) -> Option<&T> {
        match &self.slots[self.index(seq)] {
            Some((s, v)) if *s == seq => Some(v),
            _ => None,
        }
    }

    /// Mutable access to the value stored for exactly `seq`.
    pub fn get_mut(&mut self, seq: u16) -> Option<&mut T> {
        let i = self.index(seq);
        match &mut self.slots[i] {
            Some((s, v)) if *s == seq => Some(v),
            _ => None,
        }
    }

    /// Whether `seq` is stored.
    #[must_use]
    pub fn contains(&self, seq: u16) -> bool {
        self.get(seq).is_some()
    }

    /// Removes and returns the value for `seq`.
    pub fn remove(&mut self, seq: u16) -> Option<T> {
        let i = self.index(seq);
        match &self.slots[i] {
            Some((s, _)) if *s == seq => self.slots[i].take().map(|(_, v)| v),
            _ => None,
        }
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
}
