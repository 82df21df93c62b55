//! Hostile answers to desync forensics, at the router: peers that lie about
//! their entity hashes, answer what was not asked, send garbage or nothing.
//! The relay never panics, never blames anyone but the players the hash vote
//! named, ignores (and notes) every answer that does not check against the
//! hashes already reported, and reports at its deadline without stalling.

use super::*;
use lockstep::low_level::proto::{EntityDump, Join, MAX_ENTITY_HASHES, ToRelay};
use replays::DesyncReport;
use sim::forensics::{EntityHash, Field, combine_entities};

const SECTION: &str = "entities 0..1024";

fn h(b: u8) -> StateHash {
    StateHash([b; 32])
}

fn ent(id: u64, b: u8) -> EntityHash {
    EntityHash { id, hash: h(b) }
}

/// The honest entity lists: entity 5 differs on the odd side.
fn entities(odd: bool) -> Vec<EntityHash> {
    vec![ent(1, 1), ent(5, if odd { 0x55 } else { 5 }), ent(9, 9)]
}

fn sections(odd: bool) -> Vec<SectionHash> {
    vec![
        SectionHash {
            name: "globals".into(),
            hash: h(0xA0),
        },
        SectionHash {
            name: SECTION.into(),
            hash: combine_entities(&entities(odd)),
        },
    ]
}

fn dump(odd: bool, id: u64) -> EntityDump {
    let hp = if odd && id == 5 { "95" } else { "96" };
    EntityDump {
        id,
        fields: vec![Field::new("hp", hp), Field::new("pos.x", "1.5")],
    }
}

/// How a peer answers the forensics requests it gets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    Honest,
    /// Entity hashes that do not combine to its section hash (entity 9
    /// "differs" too, to frame it).
    LyingHashes,
    /// Dumps of entities it was not asked about.
    WrongDumps,
    /// Answers the section probe, then nothing.
    Silent,
    /// Never answers anything.
    Mute,
}

struct Match {
    router: Router,
    now: Instant,
    /// Player of each connection.
    players: Vec<PlayerId>,
    /// Connection of the odd peer (its hash differs).
    odd: ConnId,
    behaviour: BTreeMap<u32, Behaviour>,
}

fn addr(c: u32) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9000 + c as u16))
}

impl Match {
    /// Three players join; turn 0 closes; everyone reports its hash (conn 2
    /// differs); the relay's desync probe gets honest section hashes.
    fn desynced(behaviour: [Behaviour; 3]) -> Self {
        Self::desynced_with(behaviour, relay::config::DesyncPolicy::Continue)
    }

    fn desynced_with(behaviour: [Behaviour; 3], on_desync: relay::config::DesyncPolicy) -> Self {
        // Turn 0 closes as soon as every input is in (the `clock` policy
        // would wait for the clock this test does not advance).
        let config = RelayConfig {
            forensics_timeout: Duration::from_secs(2),
            on_desync,
            policy: relay::TurnPolicy::Deadline,
            ..RelayConfig::default()
        };
        let mut router = Router::new(config);
        let now = Instant::from_millis(1);
        for c in 0..3u32 {
            assert!(router.handle_connected(now, ConnId(c), addr(c)));
            let join = ToRelay::Join(Join {
                match_name: "h".into(),
                slots: 3,
                game_id: "toy".into(),
                game_version: 1,
                rules_hash: h(1),
                name: format!("p{c}"),
                turns: 0,
            });
            router.handle_message(now, ConnId(c), &join.to_bytes());
        }
        let mut m = Self {
            router,
            now,
            players: vec![PlayerId(0); 3],
            odd: ConnId(2),
            behaviour: (0..3u32).zip(behaviour).collect(),
        };
        for (c, msg) in m.drain() {
            if let ToPeer::Start(s) = msg {
                m.players[c.0 as usize] = s.your_player;
            }
        }
        for c in 0..3u32 {
            m.send(
                ConnId(c),
                &ToRelay::Input {
                    turn: Turn(0),
                    commands: Vec::new(),
                },
            );
        }
        for c in 0..3u32 {
            let hash = sim::hash::combine(&sections(ConnId(c) == m.odd));
            m.send(
                ConnId(c),
                &ToRelay::Hash {
                    turn: Turn(0),
                    hash,
                },
            );
        }
        m
    }

    fn send(&mut self, c: ConnId, msg: &ToRelay) {
        self.router.handle_message(self.now, c, &msg.to_bytes());
    }

    fn drain(&mut self) -> Vec<(ConnId, ToPeer)> {
        let mut out = Vec::new();
        while let Some((c, _, bytes)) = self.router.poll_outgoing() {
            out.push((c, ToPeer::decode(&bytes).unwrap()));
        }
        out
    }

    /// Answers every request the relay sent as each peer's behaviour says,
    /// until the relay asks nothing more.
    fn answer(&mut self) {
        loop {
            let mut replies = Vec::new();
            for (c, msg) in self.drain() {
                let odd = c == self.odd;
                let b = self.behaviour[&c.0];
                let reply = match (msg, b) {
                    (_, Behaviour::Mute) => None,
                    (ToPeer::SectionRequest { turn }, _) => Some(ToRelay::Sections {
                        turn,
                        sections: sections(odd),
                    }),
                    (_, Behaviour::Silent) => None,
                    (ToPeer::EntityHashRequest { turn, section }, Behaviour::LyingHashes) => {
                        let mut e = entities(odd);
                        e[2] = ent(9, 0x99);
                        Some(ToRelay::EntityHashes {
                            turn,
                            section,
                            entities: e,
                        })
                    }
                    (ToPeer::EntityHashRequest { turn, section }, _) => {
                        Some(ToRelay::EntityHashes {
                            turn,
                            section,
                            entities: entities(odd),
                        })
                    }
                    (ToPeer::EntityDumpRequest { turn, section, .. }, Behaviour::WrongDumps) => {
                        Some(ToRelay::EntityDumps {
                            turn,
                            section,
                            dumps: vec![dump(odd, 1), dump(odd, 9)],
                        })
                    }
                    (ToPeer::EntityDumpRequest { turn, section, ids }, _) => {
                        Some(ToRelay::EntityDumps {
                            turn,
                            section,
                            dumps: ids.iter().map(|&id| dump(odd, id)).collect(),
                        })
                    }
                    _ => None,
                };
                if let Some(r) = reply {
                    replies.push((c, r));
                }
            }
            if replies.is_empty() {
                return;
            }
            for (c, r) in replies {
                self.send(c, &r);
            }
        }
    }

    fn events(&mut self) -> Vec<RouterEvent> {
        std::iter::from_fn(|| self.router.poll_event()).collect()
    }

    fn report(events: &[RouterEvent]) -> Option<DesyncReport> {
        events.iter().find_map(|e| match e {
            RouterEvent::DesyncReport { report, .. } => Some((**report).clone()),
            _ => None,
        })
    }

    fn odd_player(&self) -> u8 {
        self.players[self.odd.0 as usize].0
    }
}

/// Honest peers: entity 5's `hp`, both values, and nothing else.
#[test]
fn honest_answers_name_the_entity_and_field() {
    let mut m = Match::desynced([Behaviour::Honest; 3]);
    m.answer();
    let r = Match::report(&m.events()).expect("a report");
    assert!(r.complete, "{:?}", r.notes);
    assert_eq!(r.odd_players, vec![m.odd_player()]);
    assert_eq!(r.entities.len(), 1);
    let e = &r.entities[0];
    assert_eq!((e.section.as_str(), e.id), (SECTION, 5));
    assert_eq!(e.fields.len(), 1);
    assert_eq!(
        (
            e.fields[0].path.as_str(),
            e.fields[0].majority.as_deref(),
            e.fields[0].odd.as_deref()
        ),
        ("hp", Some("96"), Some("95"))
    );
}

/// A lying odd peer (its entity list does not combine to its section hash,
/// framing entity 9) or a lying majority member: the lie is ignored and
/// noted; no entity is blamed on a lie, and the odd player stays the one
/// the vote named.
#[test]
fn lying_entity_hashes_are_ignored_and_blame_nobody_else() {
    for liar in [2u32, 0] {
        let mut b = [Behaviour::Honest; 3];
        b[liar as usize] = Behaviour::LyingHashes;
        let mut m = Match::desynced(b);
        m.answer();
        let r = Match::report(&m.events()).expect("a report");
        let liar_player = m.players[liar as usize].0;
        assert_eq!(r.odd_players, vec![m.odd_player()], "liar conn {liar}");
        assert!(!r.complete);
        assert!(r.entities.is_empty(), "{:?}", r.entities);
        assert!(
            r.notes.iter().any(|n| n.contains(&format!(
                "P{liar_player}'s entity hashes of section {SECTION} do not match"
            ))),
            "{:?}",
            r.notes
        );
    }
}

/// Dumps of other entities than asked are ignored and noted; the entity
/// the checked hashes named is still reported.
#[test]
fn dumps_of_other_entities_are_ignored() {
    let mut m = Match::desynced([Behaviour::Honest, Behaviour::Honest, Behaviour::WrongDumps]);
    m.answer();
    let r = Match::report(&m.events()).expect("a report");
    assert!(!r.complete);
    assert_eq!(r.entities.len(), 1);
    assert_eq!(r.entities[0].id, 5);
    assert!(r.entities[0].fields.iter().all(|f| f.odd.is_none()));
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("not of the entities asked")),
        "{:?}",
        r.notes
    );
}

/// Garbage: answers nobody asked for (another turn, another section, from
/// an uninvolved player, a second copy), undecodable and oversized bytes.
/// All are counted and dropped; the honest answers still complete the report.
#[test]
fn garbage_answers_are_counted_and_dropped() {
    let mut m = Match::desynced([Behaviour::Honest; 3]);
    let before = m.router.counters().clone();
    // The majority member asked is the lowest majority player; the other
    // majority player is a bystander nobody asked.
    let mut honest: Vec<(PlayerId, ConnId)> = (0..3u32)
        .map(ConnId)
        .filter(|c| *c != m.odd)
        .map(|c| (m.players[c.0 as usize], c))
        .collect();
    honest.sort();
    let bystander = honest[1].1;
    // Let the probe and the entity requests go out first.
    let garbage = |turn: u32, section: &str| ToRelay::EntityHashes {
        turn: Turn(turn),
        section: section.into(),
        entities: entities(true),
    };
    m.send(m.odd, &garbage(7, SECTION));
    m.send(m.odd, &garbage(0, "globals"));
    m.send(
        m.odd,
        &ToRelay::EntityDumps {
            turn: Turn(0),
            section: SECTION.into(),
            dumps: vec![dump(true, 5)],
        },
    );
    m.send(bystander, &garbage(0, SECTION));
    let mut huge = ToRelay::EntityHashes {
        turn: Turn(0),
        section: SECTION.into(),
        entities: (0..=MAX_ENTITY_HASHES as u64).map(|i| ent(i, 1)).collect(),
    }
    .to_bytes();
    m.router.handle_message(m.now, m.odd, &huge);
    huge.truncate(40);
    m.router.handle_message(m.now, m.odd, &huge);
    let mut state = 0x1234_5678_u64;
    for _ in 0..200 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let len = (state % 64) as usize;
        let bytes: Vec<u8> = (0..len).map(|i| (state >> (i % 56)) as u8).collect();
        m.router.handle_message(m.now, m.odd, &bytes);
    }
    m.answer();
    // A second, late copy of an answer already taken.
    m.send(m.odd, &garbage(0, SECTION));
    let after = m.router.counters().clone();
    assert!(
        after.forensics_refused >= before.forensics_refused + 4,
        "{after:?}"
    );
    assert!(after.decode_errors > before.decode_errors, "{after:?}");
    let r = Match::report(&m.events()).expect("a report");
    assert!(r.complete, "{:?}", r.notes);
    assert_eq!(r.entities.len(), 1);
    assert_eq!(r.entities[0].id, 5);
}

/// A peer that stops answering (after the section probe, or from the
/// start): the report comes at the deadline, incomplete, and says who did
/// not answer; turns kept closing meanwhile.
#[test]
fn a_silent_peer_delays_nobody_and_the_report_comes_at_the_deadline() {
    for (quiet, note) in [
        (Behaviour::Silent, "(timed out)"),
        (Behaviour::Mute, "sent no section hashes"),
    ] {
        let mut m = Match::desynced([Behaviour::Honest, Behaviour::Honest, quiet]);
        m.answer();
        assert!(Match::report(&m.events()).is_none());
        // Time passes; everyone keeps sending inputs and turns keep closing.
        let mut closed = 0;
        let mut report = None;
        for t in 1..40u32 {
            m.now = Instant::from_millis(1 + u64::from(t) * 100);
            for c in 0..3u32 {
                m.send(
                    ConnId(c),
                    &ToRelay::Input {
                        turn: Turn(t),
                        commands: Vec::new(),
                    },
                );
            }
            m.router.handle_timeout(m.now);
            m.drain();
            for e in m.events() {
                match e {
                    RouterEvent::TurnClosed { .. } if report.is_none() => closed += 1,
                    RouterEvent::DesyncReport { report: r, .. } => report = Some(*r),
                    _ => {}
                }
            }
        }
        let r = report.expect("a report at the deadline");
        assert!(closed >= 15, "turns closed while waiting: {closed}");
        assert!(!r.complete);
        assert_eq!(r.odd_players, vec![m.odd_player()]);
        assert!(r.notes.iter().any(|n| n.contains(note)), "{:?}", r.notes);
    }
}

/// `--on-desync end` with a peer that never answers: the match still ends
/// (with reason `Desync`) at the deadline, after an incomplete report.
#[test]
fn on_desync_end_with_a_mute_peer_ends_at_the_deadline_after_the_report() {
    let mut m = Match::desynced_with(
        [Behaviour::Honest, Behaviour::Honest, Behaviour::Mute],
        relay::config::DesyncPolicy::End,
    );
    m.answer();
    let mut seen = Vec::new();
    for t in 1..40u32 {
        m.now = Instant::from_millis(1 + u64::from(t) * 100);
        for c in 0..3u32 {
            m.send(
                ConnId(c),
                &ToRelay::Input {
                    turn: Turn(t),
                    commands: Vec::new(),
                },
            );
        }
        m.router.handle_timeout(m.now);
        m.drain();
        seen.extend(m.events());
    }
    let report = seen
        .iter()
        .position(|e| matches!(e, RouterEvent::DesyncReport { .. }))
        .expect("a report");
    let end = seen
        .iter()
        .position(|e| {
            matches!(
                e,
                RouterEvent::MatchEnded {
                    reason: EndReason::Desync,
                    ..
                }
            )
        })
        .expect("the match ended");
    assert!(report < end);
    let r = Match::report(&seen).unwrap();
    assert!(!r.complete);
}
