//! Hostile input at the turn level: one player of four also floods the router
//! (inputs far in the future and past, over-full and duplicate inputs,
//! commands dressed up as another player's, stray hashes) far above the
//! per-connection message rate. The three honest peers must not notice:
//! same turn rate as a clean run, never missing from a bundle more often,
//! every peer agreeing on every hash.

use super::*;
use lockstep::low_level::proto::{MAX_INPUT_CHUNKS, ToRelay};

/// Bytes no honest toy peer sends: marks the hostile peer's forged commands.
const FORGED: u8 = 0xEE;

fn flood(now: Instant, step: u64) -> Vec<Vec<u8>> {
    // Once the match runs (a flood before it would only rate-limit the
    // flooder's own join).
    if now < Instant::from_millis(500) {
        return Vec::new();
    }
    let near = Turn(u32::try_from(now.as_micros() / 100_000).unwrap_or(0));
    let mut out = Vec::new();
    for k in 0..40u64 {
        let msg = match (step + k) % 8 {
            // Far in the future and far in the past.
            0 => ToRelay::Input {
                turn: Turn(u32::MAX - k as u32),
                commands: vec![vec![FORGED, 1]],
            },
            1 => ToRelay::Input {
                turn: Turn(0),
                commands: vec![vec![FORGED, 2]; MAX_INPUT_CHUNKS],
            },
            // Late inputs for recent turns: each would be carried into the
            // next bundle; the per-player share keeps room for the others.
            2 => ToRelay::Input {
                turn: Turn(near.0.saturating_sub(1 + (k as u32 % 5))),
                commands: vec![vec![FORGED, 3]; MAX_INPUT_CHUNKS],
            },
            // Inputs for the coming turns, "as" player 1 (inside the payload:
            // the only place a claim can be) and duplicated.
            3 | 4 => ToRelay::Input {
                turn: Turn(near.0 + 3 + (k as u32 % 4)),
                commands: vec![vec![FORGED, 1, 1]],
            },
            5 => ToRelay::Hash {
                turn: Turn(near.0 + (k as u32 % 7)),
                hash: StateHash([0xEE; 32]),
            },
            6 => ToRelay::Pong { stamp_us: step },
            // More chunks than the cap: must not even decode.
            _ => ToRelay::Input {
                turn: Turn(near.0 + 4),
                commands: vec![vec![FORGED]; MAX_INPUT_CHUNKS + 1],
            },
        };
        out.push(msg.to_bytes());
    }
    out
}

fn missing_count(sim: &Sim, player: PlayerId) -> usize {
    sim.router_events
        .iter()
        .filter(
            |e| matches!(e, RouterEvent::TurnClosed { missing, .. } if missing.contains(&player)),
        )
        .count()
}

#[test]
fn a_flooding_forging_player_leaves_the_others_turn_rate_and_hashes_untouched() {
    let turns = 150;
    // `deadline`: the flood's late inputs are carried (the `clock` policy
    // has no late inputs).
    let setup = || {
        let mut s = Setup::new(4, turns, 21);
        s.config = deadline_config();
        s
    };
    let mut clean = Sim::new(setup());
    clean.run(Duration::from_secs(60));
    let mut sim = Sim::new(setup());
    sim.flood = Some((0, flood));
    sim.run(Duration::from_secs(60));

    let player_of = |sim: &Sim, i: usize| {
        sim.peers[i]
            .events
            .iter()
            .find_map(|e| match e {
                Event::Started { your_player, .. } => Some(*your_player),
                _ => None,
            })
            .unwrap()
    };
    let hostile = player_of(&sim, 0);
    let c = sim.router.counters();
    assert!(c.rate_limited > 1000, "{c:?}");
    assert!(c.inputs_refused > 0 && c.inputs_late > 0, "{c:?}");
    assert!(c.decode_errors > 0 && c.hashes_refused > 0, "{c:?}");

    for i in 1..4 {
        // Every turn, in order, to the end; at the clean run's pace.
        assert_eq!(assert_contiguous(&sim, i), turns, "peer {i}");
        assert!(sim.peers[i].ended);
        let me = player_of(&sim, i);
        assert!(
            missing_count(&sim, me) <= missing_count(&clean, me),
            "peer {i} missed more turns under the flood"
        );
        // Same hashes as every other peer, turn by turn.
        assert_eq!(sim.hashes(i), sim.hashes(1));
        // Nothing forged ever appears under an honest player's id.
        for (_, inputs, _) in &sim.peers[i].executed {
            for (p, bytes) in inputs {
                if *p != hostile {
                    assert_ne!(
                        bytes.first(),
                        Some(&FORGED),
                        "forged input stamped as {p:?}"
                    );
                }
            }
        }
    }
    // The honest peers' turns kept their pace: no more stalling and no
    // higher command latency than in the clean run (within one turn).
    for i in 1..4 {
        let (f, c) = (sim.stats(i), clean.stats(i));
        assert!(
            f.stalled_turns <= c.stalled_turns,
            "peer {i}: {f:?} vs {c:?}"
        );
        assert!(
            f.stall <= c.stall + Duration::from_millis(100),
            "peer {i}: {f:?} vs {c:?}"
        );
        assert!(
            f.latency_p99 <= c.latency_p99 + Duration::from_millis(100),
            "peer {i}"
        );
    }
    // The hostile player's forged commands were confined to its share.
    let per_turn_max = sim.peers[1]
        .executed
        .iter()
        .map(|(_, inputs, _)| inputs.iter().filter(|(p, _)| *p == hostile).count())
        .max()
        .unwrap();
    assert!(per_turn_max <= 2 * MAX_INPUT_CHUNKS, "{per_turn_max}");
}
