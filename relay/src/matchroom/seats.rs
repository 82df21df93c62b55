//! Player ids as a running match seats them, and sets of them: a [`Seat`]
//! exists only for ids below `MAX_PLAYERS`, so every seat has its bit in a
//! [`PlayerSet`] and no id is made up for a slot index.

use super::{Game, Slot};
use sim::{MAX_PLAYERS, PlayerId};

// A `PlayerSet` holds one bit per seat in a `u32`: 32 players, each its own.
const _: () = assert!(MAX_PLAYERS as u32 <= u32::BITS);

/// A player id below `MAX_PLAYERS`, the most a match seats (the wire
/// decoder refuses joins for more slots).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Seat(u8);

impl Seat {
    /// The seat of `player`; `None` if no match can seat that id.
    pub(super) const fn new(player: PlayerId) -> Option<Self> {
        if player.0 < MAX_PLAYERS {
            Some(Self(player.0))
        } else {
            None
        }
    }

    /// Every seat in slot order: zipped with a match's slots, it names them.
    pub(super) fn all() -> impl Iterator<Item = Self> {
        (0..MAX_PLAYERS).map(Self)
    }

    /// The player id of this seat.
    pub(super) const fn id(self) -> PlayerId {
        PlayerId(self.0)
    }

    /// This seat's index in a match's slots.
    pub(super) fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// A set of a match's players, one bit per seat.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct PlayerSet(u32);

impl PlayerSet {
    /// Adds `seat`.
    pub(super) const fn insert(&mut self, seat: Seat) {
        self.0 |= 1 << seat.0;
    }

    /// Whether `seat` is in the set.
    pub(super) const fn contains(self, seat: Seat) -> bool {
        self.0 & (1 << seat.0) != 0
    }
}

impl Game {
    /// Every slot with its seat, in slot order.
    pub(super) fn seats(&self) -> impl Iterator<Item = (Seat, &Slot)> {
        Seat::all().zip(&self.slots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_below_max_players_have_a_seat() {
        assert_eq!(Seat::new(PlayerId(0)).map(Seat::id), Some(PlayerId(0)));
        let last = PlayerId(MAX_PLAYERS - 1);
        assert_eq!(Seat::new(last).map(Seat::id), Some(last));
        assert_eq!(Seat::new(PlayerId(MAX_PLAYERS)), None);
        assert_eq!(Seat::new(PlayerId(u8::MAX)), None);
        assert_eq!(Seat::all().count(), usize::from(MAX_PLAYERS));
    }

    #[test]
    fn a_player_set_holds_exactly_what_was_inserted() {
        let mut s = PlayerSet::default();
        let seats: Vec<Seat> = Seat::all().collect();
        assert!(seats.iter().all(|&x| !s.contains(x)));
        for &x in seats.iter().step_by(2) {
            s.insert(x);
        }
        for (i, &x) in seats.iter().enumerate() {
            assert_eq!(s.contains(x), i % 2 == 0, "seat {i}");
        }
        // Every seat has its own bit, the last one included: seats 8, 16
        // and 24 are not seat 0 (a `u8` of bits would fold or overflow).
        assert_eq!(seats.len(), 32);
        let mut zero = PlayerSet::default();
        zero.insert(seats[0]);
        assert!(seats[1..].iter().all(|&x| !zero.contains(x)));
        let mut all = PlayerSet::default();
        seats.iter().for_each(|&x| all.insert(x));
        assert!(seats.iter().all(|&x| all.contains(x)));
    }
}
