//! Hash judging of a running match and the desync probe that asks the odd
//! players for their section hashes.

use super::Game;
use crate::config::RelayConfig;
use crate::desync::{Verdict, differing_sections};
use crate::event::{MatchId, RouterEvent};
use crate::outbox::Outbox;
use lockstep::Instant;
use lockstep::low_level::proto::{DesyncReport, ToPeer};
use sim::{PlayerId, SectionHash, StateHash, Turn};

/// The section comparison of the first desync.
#[derive(Debug)]
pub(super) struct Probe {
    turn: Turn,
    waiting: Vec<PlayerId>,
    got: Vec<(PlayerId, Vec<SectionHash>)>,
    /// The turn's hash reports and a majority member, for the forensics.
    hashes: Vec<(PlayerId, StateHash)>,
    majority_member: Option<PlayerId>,
    /// When the probe stops waiting (set at the first tick after it began).
    deadline: Option<Instant>,
}

impl Game {
    /// Players expected to report `hash(turn)`: present at that turn and still connected.
    pub(super) fn expected(&self, turn: Turn) -> Vec<PlayerId> {
        self.seats()
            .filter(|(_, s)| {
                s.conn.is_some()
                    && !s.rejoining
                    && s.dropped_at.is_none_or(|d| d > turn)
                    && s.back_from.is_none_or(|b| b <= turn)
            })
            .map(|(seat, _)| seat.id())
            .collect()
    }

    pub(super) fn judge_hashes(
        &mut self,
        id: MatchId,
        config: &RelayConfig,
        out: &mut Outbox,
        force: bool,
    ) {
        let force = force || self.hashes.pending() >= config.limits.max_hash_turns;
        let verdicts = {
            let mut book = std::mem::take(&mut self.hashes);
            let v = book.judge_ready(|t: Turn| self.expected(t), force);
            self.hashes = book;
            v
        };
        for (turn, verdict) in verdicts {
            self.heal_judged(turn, matches!(verdict, Verdict::Agreed(_)));
            match verdict {
                Verdict::Agreed(hash) => {
                    self.agreed.insert(turn, hash);
                    self.snapshot_judged(turn, Some(hash), out);
                    out.events
                        .push_back(RouterEvent::HashAgreed { id, turn, hash });
                }
                Verdict::Desync {
                    hashes,
                    odd,
                    majority_member,
                } => {
                    out.counters.desynced_turns += 1;
                    // Every disputed turn is reported (the recorder keeps a
                    // hash per turn); the announcement below only once.
                    let majority = majority_member
                        .and_then(|m| hashes.iter().find(|(p, _)| *p == m))
                        .map(|(_, h)| *h);
                    self.snapshot_judged(turn, majority, out);
                    if let Some(h) = majority {
                        self.agreed.insert(turn, h);
                    }
                    let dissent = hashes
                        .iter()
                        .filter(|(_, h)| majority != Some(*h))
                        .copied()
                        .collect();
                    out.events.push_back(RouterEvent::HashDisputed {
                        id,
                        turn,
                        majority,
                        dissent,
                    });
                    if self.desynced {
                        continue;
                    }
                    self.desynced = true;
                    if config.on_desync == crate::config::DesyncPolicy::End {
                        self.desync_end = true;
                    }
                    if config.on_desync == crate::config::DesyncPolicy::Heal
                        && majority_member.is_some()
                    {
                        self.plan_heal(turn, &odd, config);
                    }
                    self.broadcast(
                        out,
                        &ToPeer::Desync(DesyncReport {
                            turn,
                            hashes: hashes.clone(),
                            odd_players: odd.clone(),
                        }),
                    );
                    out.events.push_back(RouterEvent::Desync {
                        id,
                        turn,
                        hashes: hashes.clone(),
                        odd_players: odd.clone(),
                    });
                    // Compare the odd players with one majority member; with
                    // no majority, everyone who reported.
                    let mut ask: Vec<PlayerId> = match majority_member {
                        Some(m) => odd.iter().copied().chain([m]).collect(),
                        None => hashes.iter().map(|(p, _)| *p).collect(),
                    };
                    ask.sort();
                    for p in &ask {
                        if let Some(conn) = self.slots.get(usize::from(p.0)).and_then(|s| s.conn) {
                            out.send(conn, &ToPeer::SectionRequest { turn });
                        }
                    }
                    self.probe = Some(Probe {
                        turn,
                        waiting: ask,
                        got: Vec::new(),
                        hashes: hashes.clone(),
                        majority_member,
                        deadline: None,
                    });
                }
            }
        }
        self.trim_agreed();
    }

    #[allow(clippy::too_many_arguments)] // the message's fields plus the context
    pub(super) fn on_sections(
        &mut self,
        now: Instant,
        id: MatchId,
        player: PlayerId,
        turn: Turn,
        sections: Vec<SectionHash>,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        let Some(probe) = &mut self.probe else {
            out.counters.bad_state += 1;
            return;
        };
        if probe.turn != turn || !probe.waiting.contains(&player) {
            out.counters.bad_state += 1;
            return;
        }
        probe.waiting.retain(|p| *p != player);
        probe.got.push((player, sections));
        self.finish_probe(now, id, config, out);
    }

    /// Forgets section requests to players who are gone, so a desync report
    /// still completes with the sections that did arrive.
    pub(super) fn prune_probe(
        &mut self,
        now: Instant,
        id: MatchId,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        let slots = &self.slots;
        if let Some(probe) = &mut self.probe {
            let before = probe.waiting.len();
            probe.waiting.retain(|p| {
                slots
                    .get(usize::from(p.0))
                    .is_some_and(|s| s.conn.is_some())
            });
            if probe.waiting.len() != before {
                self.finish_probe(now, id, config, out);
            }
        }
    }

    /// Stops waiting for section hashes `forensics_timeout` after the probe
    /// began: a peer that never answers must not keep the desync unreported.
    pub(super) fn probe_timeout(
        &mut self,
        now: Instant,
        id: MatchId,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        if let Some(probe) = &mut self.probe {
            let deadline = *probe.deadline.get_or_insert(now + config.forensics_timeout);
            if now >= deadline {
                self.cut_probe(now, id, config, out);
            }
        }
    }

    /// Stops waiting for section hashes now and reports what arrived.
    pub(super) fn cut_probe(
        &mut self,
        now: Instant,
        id: MatchId,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        if let Some(probe) = &mut self.probe {
            probe.waiting.clear();
            self.finish_probe(now, id, config, out);
        }
    }

    /// When the section probe stops waiting, if one is running.
    pub(super) fn probe_deadline(&self) -> Option<Instant> {
        self.probe.as_ref().and_then(|p| p.deadline)
    }

    /// Reports the section diff once every requested peer answered, then
    /// starts narrowing it to entities (see `forensics`).
    pub(super) fn finish_probe(
        &mut self,
        now: Instant,
        id: MatchId,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        let Some(probe) = &mut self.probe else {
            return;
        };
        if !probe.waiting.is_empty() {
            return;
        }
        let turn = probe.turn;
        let mut got = std::mem::take(&mut probe.got);
        got.sort_by_key(|(p, _)| *p);
        let (hashes, majority_member) = (std::mem::take(&mut probe.hashes), probe.majority_member);
        self.probe = None;
        let players: Vec<PlayerId> = got.iter().map(|(p, _)| *p).collect();
        let sections = differing_sections(&got);
        self.broadcast(
            out,
            &ToPeer::SectionDiff {
                turn,
                players: players.clone(),
                sections: sections.clone(),
            },
        );
        out.events.push_back(RouterEvent::DesyncSections {
            id,
            turn,
            players,
            sections,
        });
        self.start_forensics(now, id, turn, &hashes, majority_member, &got, config, out);
    }
}
