//! `relay demo --on-desync heal`: the heals the relay reported, for the
//! JSON (`heals`) and the table, and whether they make the run a success
//! (exit 0: every desync healed and the hashes agree at the end).

use super::{DemoReport, Note};
use crate::event::RouterEvent;
use serde::Serialize;

/// One heal (`relay demo --json`: `heals[i]`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DemoHeal {
    /// The desync healed.
    pub desync_turn: u32,
    /// The players re-synchronised.
    pub players: Vec<u8>,
    /// The agreed snapshot they restored (`None`: the setup's world).
    pub snapshot_turn: Option<u32>,
    /// The first turn every player agreed on again (`None`: the heal was
    /// sent but never completed).
    pub turn: Option<u32>,
    /// Milliseconds from the relay judging the desync to that agreement.
    pub ms: Option<f64>,
}

/// The heals among the relay's events, in the order they started.
pub(super) fn heals(notes: &[Note]) -> Vec<DemoHeal> {
    let mut heals: Vec<DemoHeal> = Vec::new();
    for n in notes {
        match n {
            Note::Event(RouterEvent::Healing {
                desync_turn,
                players,
                snapshot,
                ..
            }) => heals.push(DemoHeal {
                desync_turn: desync_turn.0,
                players: players.iter().map(|p| p.0).collect(),
                snapshot_turn: snapshot.map(|t| t.0),
                turn: None,
                ms: None,
            }),
            Note::Event(RouterEvent::Healed {
                desync_turn,
                turn,
                took_us,
                ..
            }) => {
                if let Some(h) = heals
                    .iter_mut()
                    .rev()
                    .find(|h| h.desync_turn == desync_turn.0)
                {
                    h.turn = Some(turn.0);
                    h.ms = Some(*took_us as f64 / 1000.0);
                }
            }
            _ => {}
        }
    }
    heals
}

impl DemoReport {
    /// Every desync was healed to agreement (and there was one).
    pub(super) fn all_healed(&self) -> bool {
        !self.desyncs.is_empty()
            && self.desyncs.iter().all(|d| {
                self.heals
                    .iter()
                    .any(|h| h.desync_turn == d.turn && h.turn.is_some())
            })
    }

    /// The table's heal lines.
    pub(super) fn heal_lines(&self) -> String {
        self.heals
            .iter()
            .map(|h| {
                let from = h
                    .snapshot_turn
                    .map_or_else(|| "the setup".to_owned(), |t| format!("snapshot {t}"));
                match (h.turn, h.ms) {
                    (Some(t), Some(ms)) => format!(
                        "HEALED desync of turn {}: players {:?} from {from}, agreeing again from turn {t} ({ms:.0} ms)\n",
                        h.desync_turn, h.players
                    ),
                    _ => format!(
                        "heal of desync of turn {}: players {:?} from {from}, not completed\n",
                        h.desync_turn, h.players
                    ),
                }
            })
            .collect()
    }
}
