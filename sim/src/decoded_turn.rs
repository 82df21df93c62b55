//! The one canonical decode of a turn's relay-stamped inputs: peers, replay
//! verification, recording and tests all simulate what [`decode_turn`] returns.

use crate::contract::{MAX_PLAYERS, PlayerId, Stamped, canonical_order, decode_commands};
use serde::de::DeserializeOwned;

/// One turn's inputs decoded into the commands to simulate, with a count of
/// what was thrown away. Returned by [`decode_turn`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedTurn<C> {
    /// The commands to pass to [`Simulation::step`](crate::Simulation::step),
    /// in canonical order (see [`decode_turn`]).
    pub commands: Vec<Stamped<C>>,
    /// Entries of players in the match whose bytes are not a valid command
    /// list ([`InputError`](crate::InputError)); each counts as an empty input.
    pub rejected: u32,
    /// Entries stamped with a player outside the match (`>= players`); dropped
    /// unread. An honest relay never stamps one, so these come only from a
    /// hostile relay or a forged recording.
    pub invalid_players: u32,
}

/// Decodes one turn's inputs (as a relay bundles and records them: one
/// `(player, bytes)` entry per input chunk, several per player allowed) for a
/// match of `players` players.
///
/// This is the only decode a peer, `replays::verify`, a recorder and a test
/// should use, so a replay re-simulates exactly what the peers simulated:
///
/// - an entry whose player is `>= players` (or `>= MAX_PLAYERS`) is dropped
///   and counted in [`DecodedTurn::invalid_players`];
/// - every other entry is decoded on its own with [`decode_commands`] (so
///   `seq` restarts at 0 per entry); one that does not decode counts as empty
///   and in [`DecodedTurn::rejected`];
/// - the commands come out in [`canonical_order`], and commands with equal
///   `(player, seq)` (from several entries of one player) are ordered by
///   their entry's bytes: the result never depends on the order of `inputs`.
#[must_use]
pub fn decode_turn<C: DeserializeOwned>(
    inputs: &[(PlayerId, Vec<u8>)],
    players: u8,
) -> DecodedTurn<C> {
    let players = players.min(MAX_PLAYERS);
    let mut entries: Vec<&(PlayerId, Vec<u8>)> = Vec::with_capacity(inputs.len());
    let mut invalid_players = 0u32;
    for entry in inputs {
        if entry.0.0 < players {
            entries.push(entry);
        } else {
            invalid_players = invalid_players.saturating_add(1);
        }
    }
    // Sorting the entries first makes the stable canonical sort below break
    // (player, seq) ties by entry bytes instead of by arrival order.
    entries.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let mut commands = Vec::new();
    let mut rejected = 0u32;
    for (player, bytes) in entries {
        match decode_commands(*player, bytes) {
            Ok(decoded) => commands.extend(decoded),
            Err(_) => rejected = rejected.saturating_add(1),
        }
    }
    canonical_order(&mut commands);
    DecodedTurn {
        commands,
        rejected,
        invalid_players,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;
    use crate::encode_commands;

    fn enc(commands: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_commands(commands, &mut out);
        out
    }

    fn summary(d: &DecodedTurn<u32>) -> Vec<(u8, u16, u32)> {
        d.commands
            .iter()
            .map(|s| (s.player.0, s.seq, s.command))
            .collect()
    }

    #[test]
    fn decodes_each_entry_then_orders_ties_by_entry_bytes() {
        let a = enc(&[10, 11]);
        let b = enc(&[12]);
        let inputs = vec![
            (PlayerId(1), a),
            (PlayerId(0), b.clone()),
            (PlayerId(1), b),
            (PlayerId(0), vec![0xff, 0xff]),
        ];
        let d = decode_turn::<u32>(&inputs, 2);
        // Player 1's entries: [12] encodes as [1, 12] < [2, 10, 11].
        assert_eq!(
            summary(&d),
            vec![(0, 0, 12), (1, 0, 12), (1, 0, 10), (1, 1, 11)]
        );
        assert_eq!((d.rejected, d.invalid_players), (1, 0));
    }

    #[test]
    fn players_outside_the_match_are_dropped_and_counted_not_decoded() {
        let inputs = vec![
            (PlayerId(0), enc(&[1])),
            (PlayerId(2), enc(&[2])),
            (PlayerId(3), vec![0xff]),
            (PlayerId(200), enc(&[3])),
            (PlayerId(1), vec![0xff]),
        ];
        let d = decode_turn::<u32>(&inputs, 2);
        assert_eq!(summary(&d), vec![(0, 0, 1)]);
        assert_eq!((d.rejected, d.invalid_players), (1, 3));
        // A player count above the protocol's bound is capped by it.
        let d = decode_turn::<u32>(&inputs, u8::MAX);
        assert_eq!(summary(&d), vec![(0, 0, 1), (2, 0, 2)]);
        assert_eq!((d.rejected, d.invalid_players), (2, 1));
    }

    #[test]
    fn arrival_order_never_matters() {
        let inputs = vec![
            (PlayerId(1), enc(&[5, 6])),
            (PlayerId(1), enc(&[7])),
            (PlayerId(0), enc(&[8])),
            (PlayerId(1), enc(&[5, 6])),
            (PlayerId(9), enc(&[9])),
            (PlayerId(0), vec![1]),
        ];
        let want = decode_turn::<u32>(&inputs, 3);
        let mut shuffled = inputs;
        for k in 0..shuffled.len() {
            shuffled.rotate_left(1);
            shuffled.swap(0, k);
            assert_eq!(decode_turn::<u32>(&shuffled, 3), want);
        }
    }
}
