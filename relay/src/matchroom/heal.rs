//! `--on-desync heal`: once a desync with a majority is reported, the odd
//! players are re-synchronised on their live connections from the latest
//! agreed snapshot and the bundle tail (the rejoin path without a
//! reconnect): each gets a `ToPeer::Heal`, the snapshot chunks and the tail,
//! drops its world, restores, fast-forwards and reports `CaughtUp`. Its
//! inputs and hashes count again from the next turn to close (the heal
//! turn); the first judged turn from there that agrees ends the heal, and
//! desync detection (and snapshot requests) resume.
//!
//! The heal waits for the desync report: the narrowing asks the odd peer
//! about its diverged world, which a heal would replace.

use super::Game;
use super::snapshots::Base;
use crate::config::RelayConfig;
use crate::event::{DropReason, MatchId, RouterEvent};
use crate::outbox::Outbox;
use lockstep::Instant;
use lockstep::low_level::proto::{Delivery, Heal, ToPeer};
use sim::{PlayerId, Turn};

/// A heal from the desync's verdict to the first agreeing turn after it.
#[derive(Debug)]
pub(super) struct Healing {
    desync_turn: Turn,
    /// The odd players to heal.
    players: Vec<PlayerId>,
    /// Whether the heal messages went out (after the report).
    sent: bool,
    /// Healed players not caught up yet.
    pending: Vec<PlayerId>,
    /// The heal turn: every healed player counts again from here.
    from: Option<Turn>,
    /// When the relay judged the desync (its first tick after).
    detected_at: Option<Instant>,
    /// The first turn from `from` on that agreed, once judged.
    agreed_at: Option<Turn>,
    /// Heals one player may have had within `window` turns before this one.
    max_heals: u32,
    /// `RelayConfig::heal_limit`'s window in turns (at least one).
    window: u32,
}

impl Game {
    /// The desync of `turn` has a majority and the policy is `heal`: the odd
    /// players are healed once its report is done.
    pub(super) fn plan_heal(&mut self, turn: Turn, odd: &[PlayerId], config: &RelayConfig) {
        let limit = config.heal_limit;
        let turn_us = config.turn_length.as_micros().max(1);
        let window = u32::try_from(limit.window.as_micros() / turn_us).unwrap_or(u32::MAX);
        self.healing = Some(Healing {
            desync_turn: turn,
            players: odd.to_vec(),
            sent: false,
            pending: Vec::new(),
            from: None,
            detected_at: None,
            agreed_at: None,
            max_heals: limit.heals,
            window: window.max(1),
        });
    }

    /// Drops the players a heal refused for being healed too often
    /// (`RelayConfig::heal_limit`): their connections leave the match and
    /// their slots are given up.
    pub(super) fn drop_overhealed(&mut self, now: Instant, out: &mut Outbox) {
        for p in std::mem::take(&mut self.overhealed) {
            if let Some(conn) = self.slots.get(usize::from(p.0)).and_then(|s| s.conn) {
                out.detached.push(conn);
            }
            self.drop_player(now, p, DropReason::TooManyHeals);
        }
    }

    /// Sends the planned heal (called as the desync report is emitted);
    /// returns the report's notes about it.
    pub(super) fn send_heal(&mut self, id: MatchId, out: &mut Outbox) -> Vec<String> {
        let Some(h) = self.healing.as_mut().filter(|h| !h.sent) else {
            return Vec::new();
        };
        h.sent = true;
        let desync_turn = h.desync_turn;
        let players = h.players.clone();
        let snapshot = match self.snapshots.base() {
            Base::Genesis => None,
            Base::Agreed { turn, hash, bytes } => {
                Some((*turn, *hash, u32::try_from(bytes.len()).unwrap_or(u32::MAX)))
            }
            Base::Lost => {
                // Nothing to restore from: the match plays on as with `continue`.
                self.healing = None;
                return vec![
                    "heal refused: no agreed snapshot to restore from (the bundle tail outgrew its limit); the match continues"
                        .into(),
                ];
            }
        };
        let live = self.next_close;
        let (max_heals, window) = (h.max_heals, h.window);
        let mut healed = Vec::new();
        let mut notes = Vec::new();
        for p in players {
            let Some(slot) = self.slots.get_mut(usize::from(p.0)) else {
                continue;
            };
            let Some(conn) = slot.conn.filter(|_| slot.live() && !slot.rejoining) else {
                continue;
            };
            // Heals older than the window no longer count.
            while slot
                .heals
                .front()
                .is_some_and(|t| t.0.saturating_add(window) <= live.0)
            {
                slot.heals.pop_front();
            }
            if slot.heals.len() >= max_heals as usize {
                notes.push(format!(
                    "heal refused: P{} was healed {} times in the last {window} turns; dropped ({})",
                    p.0,
                    slot.heals.len(),
                    DropReason::TooManyHeals
                ));
                self.overhealed.push(p);
                continue;
            }
            slot.heals.push_back(live);
            slot.rejoining = true;
            out.send(
                conn,
                &ToPeer::Heal(Heal {
                    desync_turn,
                    snapshot,
                    live,
                }),
            );
            self.send_snapshot(conn, snapshot, out);
            for bundle in self.snapshots.tail() {
                out.push(conn, Delivery::Urgent, bundle.to_vec());
            }
            healed.push(p);
        }
        let from = snapshot.map_or_else(
            || "the setup".to_string(),
            |(t, _, _)| format!("the agreed snapshot of turn {t}"),
        );
        let names: Vec<String> = healed.iter().map(|p| format!("P{}", p.0)).collect();
        if let Some(h) = self.healing.as_mut() {
            h.pending.clone_from(&healed);
            // Dropped or gone players are not reported as healed.
            h.players.clone_from(&healed);
        }
        if healed.is_empty() {
            self.healing = None;
            if notes.is_empty() {
                notes.push("heal: no odd player is connected; the match continues".into());
            }
            return notes;
        }
        out.events.push_back(RouterEvent::Healing {
            id,
            desync_turn,
            players: healed,
            snapshot: snapshot.map(|(t, _, _)| t),
        });
        notes.push(format!(
            "healed: {} re-synchronised from {from} and the bundles after it (live from turn {live})",
            names.join(", ")
        ));
        notes
    }

    /// A healing `player` caught up: it counts again from `turn`. True if
    /// the player was being healed (not rejoining).
    pub(super) fn heal_caught_up(&mut self, player: PlayerId, turn: Turn) -> bool {
        let Some(h) = self.healing.as_mut() else {
            return false;
        };
        if !h.pending.contains(&player) {
            return false;
        }
        h.pending.retain(|p| *p != player);
        h.from = Some(h.from.map_or(turn, |f| f.max(turn)));
        true
    }

    /// Before a verdict of `turn` is acted on: from the heal turn on, the
    /// match is judged afresh (a new desync is a new desync); an agreeing
    /// turn ends the heal.
    pub(super) fn heal_judged(&mut self, turn: Turn, agreed: bool) {
        let Some(h) = self.healing.as_mut() else {
            return;
        };
        let done = h.pending.is_empty() && h.from.is_some_and(|f| turn >= f);
        if !done || h.agreed_at.is_some() {
            return;
        }
        self.desynced = false;
        if agreed {
            h.agreed_at = Some(turn);
        } else {
            self.healing = None;
        }
    }

    /// Per tick: stamps when the desync was judged, forgets healed players
    /// who left, and reports a finished heal with its time to agreement.
    pub(super) fn heal_tick(&mut self, now: Instant, id: MatchId, out: &mut Outbox) {
        let slots = &self.slots;
        let Some(h) = self.healing.as_mut() else {
            return;
        };
        h.detected_at.get_or_insert(now);
        h.pending.retain(|p| {
            slots
                .get(usize::from(p.0))
                .is_some_and(|s| s.conn.is_some() && s.rejoining)
        });
        if h.sent && h.pending.is_empty() && h.from.is_none() {
            // Every healed player left before catching up.
            self.healing = None;
            self.desynced = false;
            return;
        }
        let Some(turn) = h.agreed_at else {
            return;
        };
        let took = now.saturating_since(h.detected_at.unwrap_or(now));
        out.events.push_back(RouterEvent::Healed {
            id,
            desync_turn: h.desync_turn,
            players: h.players.clone(),
            turn,
            took_us: took.as_micros(),
        });
        self.healing = None;
    }
}
