//! Desync forensics: after the section probe of a desync, narrows each odd
//! group's difference to entities and fields while the match goes on.
//!
//! Per odd group the relay compares one odd peer with one majority peer
//! (with no majority: every other hash group with the lowest player's side).
//! For each differing section (at most [`MAX_SECTIONS_NARROWED`]) it asks
//! both for the section's entity hashes, then for the dumps of the entities
//! that differ (at most [`MAX_DUMP_ENTITIES`] per pair). Nothing waits on
//! the answers: turns keep closing, and a peer that does not answer within
//! `RelayConfig::forensics_timeout` leaves the report incomplete.
//!
//! Every answer is checked against what the relay already has: a peer's
//! sections must combine to the hash it reported for the turn, its entity
//! list must combine to its section hash, dumps must be of the entities
//! asked. An answer that does not check is ignored and noted; who is odd
//! comes from the hash vote alone, so no answer can shift the blame. Field
//! values cannot be checked (a dump is not its hash's preimage): a report
//! that has them says so in a note ([`UNVERIFIED_VALUES`]).

use super::Game;
use crate::config::RelayConfig;
use crate::event::{MatchId, RouterEvent};
use crate::outbox::Outbox;
use lockstep::Instant;
use lockstep::low_level::proto::{EntityDump, MAX_DUMP_ENTITIES, ToPeer};
use replays::forensics::{
    Comparison, DesyncReport, EntityReport, FieldReport, PlayerHash, SectionPair,
};
use sim::forensics::{EntityHash, diff_entities, diff_fields, entities_match_section};
use sim::{PlayerId, SectionHash, StateHash, Turn};
use std::collections::BTreeMap;

/// Most differing sections narrowed per compared pair.
pub(crate) const MAX_SECTIONS_NARROWED: usize = 4;

/// The note every report with field values carries: which entities differ
/// is checked (entity lists against section hashes, sections against the
/// turn's hash), but a dump is the game's rendering of an entity, not the
/// preimage of its leaf hash, so the relay cannot check the values: they are
/// each peer's own word, marked so in the JSON and the text alike.
pub(crate) const UNVERIFIED_VALUES: &str = "field values are each peer's own report, not verified: the relay checks which entities differ against the reported hashes, but cannot check a dump against its entity hash";

/// The narrowing of one desync, in progress.
#[derive(Debug)]
pub(super) struct Forensics {
    turn: Turn,
    deadline: Instant,
    report: DesyncReport,
    pairs: Vec<Pair>,
}

/// One odd peer compared with one majority peer.
#[derive(Debug)]
struct Pair {
    odd: PlayerId,
    majority: PlayerId,
    /// Entities still reportable for this pair.
    budget: usize,
    sections: Vec<Work>,
}

/// One differing section of a pair.
#[derive(Debug)]
struct Work {
    name: String,
    odd_hash: StateHash,
    maj_hash: StateHash,
    stage: Stage,
}

#[derive(Debug)]
enum Stage {
    Hashes {
        odd: Option<Vec<EntityHash>>,
        maj: Option<Vec<EntityHash>>,
    },
    Dumps {
        ids: Vec<u64>,
        odd_hashes: Vec<EntityHash>,
        maj_hashes: Vec<EntityHash>,
        odd: Option<Vec<EntityDump>>,
        maj: Option<Vec<EntityDump>>,
    },
    Done,
}

/// Which side of a pair an answer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Odd,
    Majority,
}

/// An answer to a forensics request.
#[derive(Debug)]
pub(super) enum Answer {
    Hashes(Vec<EntityHash>),
    Dumps(Vec<EntityDump>),
}

/// The players' copy of a finished report: its entities and fields, cut
/// to the protocol's bounds.
fn details_of(report: &DesyncReport) -> lockstep::low_level::proto::DesyncDetails {
    use lockstep::low_level::proto::{DesyncDetails, DesyncEntity, DesyncField};
    DesyncDetails {
        turn: Turn(report.turn),
        complete: report.complete,
        entities: report
            .entities
            .iter()
            .map(|e| DesyncEntity {
                section: e.section.clone(),
                id: e.id,
                odd_player: PlayerId(e.odd_player),
                majority_player: PlayerId(e.majority_player),
                fields: e
                    .fields
                    .iter()
                    .map(|f| DesyncField {
                        path: f.path.clone(),
                        majority: f.majority.clone(),
                        odd: f.odd.clone(),
                    })
                    .collect(),
            })
            .collect(),
    }
    .bounded()
}

fn hex(h: &StateHash) -> String {
    h.to_hex()
}

fn find(sections: &[SectionHash], name: &str) -> Option<StateHash> {
    sections.iter().find(|s| s.name == name).map(|s| s.hash)
}

impl Game {
    /// Starts narrowing the desync of `turn` once the section probe is in:
    /// `hashes` are the reports of the turn, `got` the sections each asked
    /// peer sent.
    #[allow(clippy::too_many_arguments)] // one call site, every value distinct
    pub(super) fn start_forensics(
        &mut self,
        now: Instant,
        id: MatchId,
        turn: Turn,
        hashes: &[(PlayerId, StateHash)],
        majority_member: Option<PlayerId>,
        got: &[(PlayerId, Vec<SectionHash>)],
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        let mut report = DesyncReport {
            turn: turn.0,
            no_majority: majority_member.is_none(),
            hashes: hashes
                .iter()
                .map(|(p, h)| PlayerHash {
                    player: p.0,
                    hash: hex(h),
                })
                .collect(),
            complete: true,
            ..DesyncReport::default()
        };
        if majority_member.is_none() && config.on_desync == crate::config::DesyncPolicy::Heal {
            report.notes.push(
                "heal refused: no majority (two players or a tie), the relay cannot tell who is odd; the match continues".into(),
            );
        }
        // The reference side: the majority, or with none the lowest player's hash.
        let mut sorted = hashes.to_vec();
        sorted.sort();
        let reference = majority_member.or_else(|| sorted.first().map(|(p, _)| *p));
        let Some(reference) = reference else {
            return;
        };
        let ref_hash = hashes
            .iter()
            .find(|(p, _)| *p == reference)
            .map(|(_, h)| *h);
        let mut groups: BTreeMap<StateHash, Vec<PlayerId>> = BTreeMap::new();
        for (p, h) in &sorted {
            if Some(*h) == ref_hash {
                report.majority_players.push(p.0);
            } else {
                report.odd_players.push(p.0);
                groups.entry(*h).or_default().push(*p);
            }
        }
        let sections_of = |p: PlayerId| got.iter().find(|(q, _)| *q == p).map(|(_, s)| s);
        // A peer's sections must combine to the hash it reported.
        let checks = |p: PlayerId, report: &mut DesyncReport| -> Option<Vec<SectionHash>> {
            let Some(s) = sections_of(p) else {
                report.notes.push(format!(
                    "P{} sent no section hashes (timed out or disconnected)",
                    p.0
                ));
                return None;
            };
            let reported = hashes.iter().find(|(q, _)| *q == p).map(|(_, h)| *h);
            if s.is_empty() || Some(sim::hash::combine(s)) != reported {
                report.notes.push(format!(
                    "P{}'s section hashes do not combine to its reported hash (or it no longer kept turn {turn}): ignored",
                    p.0
                ));
                return None;
            }
            Some(s.clone())
        };
        let maj_sections = checks(reference, &mut report);
        let mut pairs = Vec::new();
        for members in groups.values() {
            // The first member that answered the probe speaks for the group.
            let Some(&odd) = members.iter().find(|p| sections_of(**p).is_some()) else {
                report.complete = false;
                report.notes.push(format!(
                    "{} sent no section hashes (timed out or disconnected)",
                    members
                        .iter()
                        .map(|p| format!("P{}", p.0))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                continue;
            };
            let Some(odd_sections) = checks(odd, &mut report) else {
                continue;
            };
            let Some(maj_sections) = &maj_sections else {
                continue;
            };
            pairs.push(Self::start_pair(
                odd,
                reference,
                &odd_sections,
                maj_sections,
                &mut report,
            ));
        }
        // One request per peer and section (the majority peer serves every pair).
        let mut asked: Vec<(PlayerId, &str)> = Vec::new();
        for pair in &pairs {
            for w in &pair.sections {
                for p in [pair.odd, pair.majority] {
                    if !asked.contains(&(p, w.name.as_str())) {
                        asked.push((p, w.name.as_str()));
                        self.send_to(
                            out,
                            p,
                            &ToPeer::EntityHashRequest {
                                turn,
                                section: w.name.clone(),
                            },
                        );
                    }
                }
            }
        }
        if maj_sections.is_none() || pairs.len() < groups.len() {
            report.complete = false;
        }
        let f = Forensics {
            turn,
            deadline: now + config.forensics_timeout,
            report,
            pairs,
        };
        self.forensics = Some(Box::new(f));
        self.finish_forensics(id, out, false);
    }

    /// Compares a pair's section lists: the differing sections to narrow
    /// (their entity hashes are asked by the caller).
    fn start_pair(
        odd: PlayerId,
        majority: PlayerId,
        odd_sections: &[SectionHash],
        maj_sections: &[SectionHash],
        report: &mut DesyncReport,
    ) -> Pair {
        let mut names: Vec<&str> = maj_sections.iter().map(|s| s.name.as_str()).collect();
        for s in odd_sections {
            if !names.contains(&s.name.as_str()) {
                names.push(&s.name);
            }
        }
        let mut comparison = Comparison {
            odd: odd.0,
            majority: majority.0,
            sections: Vec::new(),
        };
        let mut work = Vec::new();
        for name in names {
            let (m, o) = (find(maj_sections, name), find(odd_sections, name));
            let differs = m != o;
            comparison.sections.push(SectionPair {
                name: name.to_owned(),
                majority: m.as_ref().map(hex),
                odd: o.as_ref().map(hex),
                differs,
            });
            if !differs {
                continue;
            }
            match (m, o) {
                (Some(maj_hash), Some(odd_hash)) if work.len() < MAX_SECTIONS_NARROWED => {
                    work.push(Work {
                        name: name.to_owned(),
                        odd_hash,
                        maj_hash,
                        stage: Stage::Hashes {
                            odd: None,
                            maj: None,
                        },
                    });
                }
                (Some(_), Some(_)) => {
                    report.complete = false;
                    report.notes.push(format!(
                        "section {name} differs too but only {MAX_SECTIONS_NARROWED} sections are narrowed"
                    ));
                }
                _ => report.notes.push(format!(
                    "section {name} exists on one side only (P{} vs P{})",
                    majority.0, odd.0
                )),
            }
        }
        report.compared.push(comparison);
        Pair {
            odd,
            majority,
            budget: MAX_DUMP_ENTITIES,
            sections: work,
        }
    }

    fn send_to(&self, out: &mut Outbox, p: PlayerId, msg: &ToPeer) {
        if let Some(conn) = self.slots.get(usize::from(p.0)).and_then(|s| s.conn) {
            out.send(conn, msg);
        }
    }

    /// A peer's answer to a forensics request; anything not asked for, or
    /// not matching the hashes already reported, is counted and ignored.
    pub(super) fn on_forensics(
        &mut self,
        id: MatchId,
        player: PlayerId,
        turn: Turn,
        section: &str,
        answer: Answer,
        out: &mut Outbox,
    ) {
        let Some(f) = self.forensics.as_deref_mut() else {
            out.counters.forensics_refused += 1;
            return;
        };
        if f.turn != turn {
            out.counters.forensics_refused += 1;
            return;
        }
        let mut requests = Vec::new();
        // Which pairs take the answer: every pair this player speaks for in
        // that section whose stage waits on it. A dump answer goes to the
        // pair whose ids it answers (a majority peer may be asked for
        // different entities of one section by two pairs), else to the first
        // waiting pair, where it fails the check and is noted.
        let waits = |pair: &Pair, w: &Work| {
            let side = if player == pair.odd {
                Side::Odd
            } else if player == pair.majority {
                Side::Majority
            } else {
                return None;
            };
            let empty = match (&answer, &w.stage) {
                (Answer::Hashes(_), Stage::Hashes { odd, maj }) => {
                    if side == Side::Odd {
                        odd.is_none()
                    } else {
                        maj.is_none()
                    }
                }
                (Answer::Dumps(_), Stage::Dumps { odd, maj, .. }) => {
                    if side == Side::Odd {
                        odd.is_none()
                    } else {
                        maj.is_none()
                    }
                }
                _ => false,
            };
            empty.then_some(side)
        };
        let mut targets: Vec<(usize, usize, Side)> = Vec::new();
        for (i, pair) in f.pairs.iter().enumerate() {
            for (j, w) in pair.sections.iter().enumerate() {
                if w.name == section
                    && let Some(side) = waits(pair, w)
                {
                    targets.push((i, j, side));
                }
            }
        }
        if let Answer::Dumps(list) = &answer {
            let answers = |i: usize, j: usize| match &f.pairs[i].sections[j].stage {
                Stage::Dumps { ids, .. } => {
                    list.is_empty()
                        || (list.len() == ids.len() && list.iter().all(|d| ids.contains(&d.id)))
                }
                _ => false,
            };
            let exact: Vec<_> = targets
                .iter()
                .copied()
                .filter(|(i, j, _)| answers(*i, *j))
                .take(1)
                .collect();
            targets = if exact.is_empty() {
                targets.into_iter().take(1).collect()
            } else {
                exact
            };
        }
        let used = !targets.is_empty();
        for (i, j, side) in targets {
            let pair = &mut f.pairs[i];
            let w = &mut pair.sections[j];
            match (&answer, &mut w.stage) {
                (Answer::Hashes(list), Stage::Hashes { odd, maj }) => {
                    *(if side == Side::Odd { odd } else { maj }) = Some(list.clone());
                }
                (Answer::Dumps(list), Stage::Dumps { odd, maj, .. }) => {
                    *(if side == Side::Odd { odd } else { maj }) = Some(list.clone());
                }
                _ => {}
            }
            if let Some(ids) = advance(
                turn,
                pair.odd,
                pair.majority,
                &mut pair.budget,
                w,
                &mut f.report,
            ) {
                requests.push((pair.odd, pair.majority, w.name.clone(), ids));
            }
        }
        if !used {
            out.counters.forensics_refused += 1;
            return;
        }
        for (odd, majority, section, ids) in requests {
            for p in [odd, majority] {
                self.send_to(
                    out,
                    p,
                    &ToPeer::EntityDumpRequest {
                        turn,
                        section: section.clone(),
                        ids: ids.clone(),
                    },
                );
            }
        }
        self.finish_forensics(id, out, false);
    }

    /// Ends the narrowing when every section is done, when the deadline
    /// passed (`expired`), or when a peer it waits on is gone: emits the report.
    pub(super) fn finish_forensics(&mut self, id: MatchId, out: &mut Outbox, expired: bool) {
        let slots = &self.slots;
        let Some(f) = self.forensics.as_deref_mut() else {
            return;
        };
        let gone = |p: PlayerId| slots.get(usize::from(p.0)).is_none_or(|s| s.conn.is_none());
        for pair in &mut f.pairs {
            for w in &mut pair.sections {
                let (odd_missing, maj_missing) = match &w.stage {
                    Stage::Hashes { odd, maj } => (odd.is_none(), maj.is_none()),
                    Stage::Dumps { odd, maj, .. } => (odd.is_none(), maj.is_none()),
                    Stage::Done => (false, false),
                };
                let waiting: Vec<PlayerId> =
                    [(odd_missing, pair.odd), (maj_missing, pair.majority)]
                        .into_iter()
                        .filter(|(w, _)| *w)
                        .map(|(_, p)| p)
                        .collect();
                if waiting.is_empty() {
                    continue;
                }
                let stop = expired || waiting.iter().any(|p| gone(*p));
                if stop {
                    let who: Vec<String> = waiting.iter().map(|p| format!("P{}", p.0)).collect();
                    f.report.notes.push(format!(
                        "no answer about section {} from {} ({})",
                        w.name,
                        who.join(", "),
                        if expired { "timed out" } else { "disconnected" }
                    ));
                    f.report.complete = false;
                    w.stage = Stage::Done;
                }
            }
        }
        let done = f
            .pairs
            .iter()
            .all(|p| p.sections.iter().all(|w| matches!(w.stage, Stage::Done)));
        if !done {
            return;
        }
        if let Some(mut f) = self.forensics.take() {
            // Every player learns what differs, not only the operator: a
            // game can show it, log it or file it with its bug report.
            self.broadcast(out, &ToPeer::DesyncDetails(details_of(&f.report)));
            let heal = self.send_heal(id, out);
            f.report.notes.extend(heal);
            out.events.push_back(RouterEvent::DesyncReport {
                id,
                report: Box::new(f.report),
            });
        }
    }

    /// Ends the narrowing at its deadline.
    pub(super) fn forensics_timeout(&mut self, now: Instant, id: MatchId, out: &mut Outbox) {
        let expired = self.forensics.as_ref().is_some_and(|f| now >= f.deadline);
        self.finish_forensics(id, out, expired);
    }

    /// When the narrowing gives up waiting, if one is running.
    pub(super) fn forensics_deadline(&self) -> Option<Instant> {
        self.forensics.as_ref().map(|f| f.deadline)
    }
}

/// Moves a section on once both sides answered its current stage: checks
/// entity lists against the section hashes and picks the differing ids (to
/// ask dumps of: returned), or turns both dumps into a field diff.
fn advance(
    turn: Turn,
    odd: PlayerId,
    majority: PlayerId,
    budget: &mut usize,
    w: &mut Work,
    report: &mut DesyncReport,
) -> Option<Vec<u64>> {
    match &mut w.stage {
        Stage::Hashes {
            odd: Some(o),
            maj: Some(m),
        } => {
            let mut ok = true;
            for (p, list, hash) in [(odd, &*o, &w.odd_hash), (majority, &*m, &w.maj_hash)] {
                if list.is_empty() {
                    report.notes.push(format!(
                        "P{} no longer keeps turn {turn} (section {})",
                        p.0, w.name
                    ));
                    ok = false;
                } else if !entities_match_section(list, hash) {
                    report.notes.push(format!(
                        "P{}'s entity hashes of section {} do not match its section hash: ignored",
                        p.0, w.name
                    ));
                    ok = false;
                }
            }
            if !ok {
                report.complete = false;
                w.stage = Stage::Done;
                return None;
            }
            let mut ids = diff_entities(m, o);
            if ids.len() > *budget {
                report.complete = false;
                report.notes.push(format!(
                    "{} entities of section {} differ; the first {} are reported",
                    ids.len(),
                    w.name,
                    *budget
                ));
                ids.truncate(*budget);
            }
            *budget -= ids.len();
            if ids.is_empty() {
                w.stage = Stage::Done;
                return None;
            }
            w.stage = Stage::Dumps {
                ids: ids.clone(),
                odd_hashes: std::mem::take(o),
                maj_hashes: std::mem::take(m),
                odd: None,
                maj: None,
            };
            Some(ids)
        }
        Stage::Dumps {
            ids,
            odd_hashes,
            maj_hashes,
            odd: Some(o),
            maj: Some(m),
        } => {
            let valid = |list: &[EntityDump]| {
                list.iter().all(|d| ids.contains(&d.id))
                    && list
                        .iter()
                        .enumerate()
                        .all(|(i, d)| list[..i].iter().all(|e| e.id != d.id))
            };
            for (p, list) in [(odd, &mut *o), (majority, &mut *m)] {
                if !valid(list) {
                    report.complete = false;
                    report.notes.push(format!(
                        "P{}'s dumps of section {} are not of the entities asked: ignored",
                        p.0, w.name
                    ));
                    list.clear();
                }
            }
            let hash_of = |list: &[EntityHash], id: u64| {
                list.iter().find(|e| e.id == id).map(|e| hex(&e.hash))
            };
            let fields_of = |list: &[EntityDump], id: u64| {
                list.iter()
                    .find(|d| d.id == id)
                    .map(|d| d.fields.clone())
                    .unwrap_or_default()
            };
            let has_values = !o.is_empty() || !m.is_empty();
            if has_values && report.notes.iter().all(|n| n != UNVERIFIED_VALUES) {
                report.notes.push(UNVERIFIED_VALUES.to_owned());
            }
            for &id in ids.iter() {
                let fields: Vec<FieldReport> = diff_fields(&fields_of(m, id), &fields_of(o, id))
                    .into_iter()
                    .map(|d| FieldReport {
                        path: d.path,
                        majority: d.a,
                        odd: d.b,
                    })
                    .collect();
                if fields.is_empty() {
                    report.notes.push(format!(
                        "entity {id} of section {}: hashes differ but the dumps show no differing field",
                        w.name
                    ));
                }
                report.entities.push(EntityReport {
                    section: w.name.clone(),
                    id,
                    odd_player: odd.0,
                    majority_player: majority.0,
                    majority_hash: hash_of(maj_hashes, id),
                    odd_hash: hash_of(odd_hashes, id),
                    fields,
                });
            }
            w.stage = Stage::Done;
            None
        }
        _ => None,
    }
}
