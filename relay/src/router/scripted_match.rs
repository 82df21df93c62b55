//! A running match of scripted players on a virtual clock, for the
//! router's tests: the players are scripted message by message (the relay
//! never sees a world: it judges hashes and forwards bytes) and the clock
//! moves one turn at a time.

use super::*;
use crate::rejoin_config::RejoinConfig;
use lockstep::low_level::proto::{Join, SnapshotChunk};
use sim::{StateHash, Turn};
use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// What a scripted player does when the relay asks it for a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Uploads {
    /// Uploads the true snapshot of the turn.
    Honest,
    /// Never uploads anything.
    Never,
    /// Uploads bytes that do not restore, under the turn's true hash.
    Garbage,
}

/// The world hash every honest peer reports after `turn`.
pub(super) fn world_hash(turn: Turn) -> StateHash {
    let mut h = [7u8; 32];
    h[..4].copy_from_slice(&turn.0.to_le_bytes());
    StateHash(h)
}

/// The true snapshot of the world after `turn`: what restores to
/// [`world_hash`] at a receiver.
pub(super) fn true_snapshot(turn: Turn) -> Vec<u8> {
    turn.0.to_le_bytes().repeat(100)
}

pub(super) fn join(players: u8) -> Join {
    Join {
        slots: players,
        ..crate::test_support::join("m", "p")
    }
}

/// A running match of scripted players on a virtual clock.
pub(super) struct Match {
    pub(super) r: Router,
    pub(super) now: Instant,
    pub(super) uploads: Vec<Uploads>,
    /// Every message each connection got, decoded, in order.
    pub(super) got: BTreeMap<ConnId, Vec<ToPeer>>,
    /// How many of `got` the script has acted on, per connection.
    pub(super) seen: BTreeMap<ConnId, usize>,
    /// Snapshot requests, in order: (turn, player asked).
    pub(super) requests: Vec<(Turn, PlayerId)>,
    /// Connections of players that stopped (left or were dropped).
    pub(super) gone: BTreeSet<ConnId>,
    /// Connections of players that report a wrong hash for every turn.
    pub(super) liars: BTreeSet<ConnId>,
}

impl Match {
    /// `uploads.len()` players (connection `i` is player `i`) start a match.
    pub(super) fn start(config: RelayConfig, uploads: &[Uploads]) -> Self {
        let mut m = Self {
            r: Router::new(config),
            now: Instant::from_millis(10),
            uploads: uploads.to_vec(),
            got: BTreeMap::new(),
            seen: BTreeMap::new(),
            requests: Vec::new(),
            gone: BTreeSet::new(),
            liars: BTreeSet::new(),
        };
        let n = u8::try_from(uploads.len()).unwrap_or(u8::MAX);
        for c in 0..u32::from(n) {
            m.connect(c);
            m.send(c, &ToRelay::Join(join(n)));
        }
        m.act();
        m
    }

    pub(super) fn connect(&mut self, conn: u32) {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 5000 + conn as u16));
        assert!(self.r.handle_connected(self.now, ConnId(conn), addr));
    }

    pub(super) fn send(&mut self, conn: u32, msg: &ToRelay) {
        self.r
            .handle_message(self.now, ConnId(conn), &msg.to_bytes());
    }

    /// Moves the router's output to the connections' inboxes, snapshot
    /// streams included (as if every bulk path had room).
    pub(super) fn drain(&mut self) {
        while let Some((conn, _, bytes)) = self.r.poll_outgoing() {
            if let Ok(msg) = ToPeer::decode(&bytes) {
                self.got.entry(conn).or_default().push(msg);
            }
        }
        for conn in self.r.snapshot_receivers() {
            let got = self.got.entry(conn).or_default();
            self.r.stream_snapshot(conn, |bytes| {
                got.extend(ToPeer::decode(bytes).ok());
                true
            });
        }
    }

    /// The scripted players answer what they got: a hash for every bundle,
    /// an upload (or none) for every snapshot request; until nothing new.
    pub(super) fn act(&mut self) {
        loop {
            self.drain();
            let mut replies = Vec::new();
            for (i, up) in self.uploads.iter().enumerate() {
                let conn = ConnId(i as u32);
                if self.gone.contains(&conn) {
                    continue;
                }
                let msgs = self.got.get(&conn).map_or(&[][..], Vec::as_slice);
                let seen = self.seen.entry(conn).or_default();
                let lies = self.liars.contains(&conn);
                for msg in &msgs[*seen..] {
                    match msg {
                        ToPeer::Bundle(b) => replies.push((
                            conn,
                            ToRelay::Hash {
                                turn: b.turn,
                                hash: if lies {
                                    StateHash([0xEE; 32])
                                } else {
                                    world_hash(b.turn)
                                },
                            },
                        )),
                        // Healed at once (the tail needs no simulating here).
                        ToPeer::Heal(h) => replies.push((
                            conn,
                            ToRelay::CaughtUp {
                                turn: Turn(h.live.0.saturating_sub(1)),
                            },
                        )),
                        ToPeer::SnapshotRequest { turn } => {
                            self.requests.push((*turn, PlayerId(i as u8)));
                            let bytes = match up {
                                Uploads::Never => continue,
                                Uploads::Honest => true_snapshot(*turn),
                                Uploads::Garbage => b"not a world".to_vec(),
                            };
                            replies.push((conn, upload(*turn, bytes)));
                        }
                        _ => {}
                    }
                }
                *seen = msgs.len();
            }
            if replies.is_empty() {
                return;
            }
            for (conn, msg) in replies {
                self.send(conn.0, &msg);
            }
        }
    }

    /// Runs the clock `turns` turn lengths on, the players answering.
    pub(super) fn run(&mut self, turns: u32) {
        for _ in 0..turns {
            self.now += self.r.config().turn_length;
            self.r.handle_timeout(self.now);
            self.act();
        }
    }

    /// Messages connection `conn` got since `from` (an index into its inbox).
    pub(super) fn inbox(&self, conn: u32, from: usize) -> &[ToPeer] {
        self.got
            .get(&ConnId(conn))
            .map_or(&[][..], |v| v.get(from..).unwrap_or(&[]))
    }

    pub(super) fn inbox_len(&self, conn: u32) -> usize {
        self.got.get(&ConnId(conn)).map_or(0, Vec::len)
    }

    /// Connection `conn` asks to watch; what it got back.
    pub(super) fn spectate(&mut self, conn: u32) -> Vec<ToPeer> {
        let from = self.inbox_len(conn);
        self.connect(conn);
        self.send(conn, &ToRelay::Spectate(join(self.uploads.len() as u8)));
        self.act();
        self.inbox(conn, from).to_vec()
    }
}

/// One whole snapshot as a single chunk, declared under the true hash.
pub(super) fn upload(turn: Turn, bytes: Vec<u8>) -> ToRelay {
    ToRelay::SnapshotChunk(SnapshotChunk {
        turn,
        hash: world_hash(turn),
        total: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
        offset: 0,
        bytes,
    })
}

/// A relay asking for a snapshot every `snapshot_every` turns, with no
/// spectator delay (a LAN's): a spectator starts from the latest agreed
/// snapshot, so these tests see the snapshot mechanics without waiting for
/// one to age (the delay's own test sets one).
pub(super) fn config(snapshot_every: u32) -> RelayConfig {
    RelayConfig {
        rejoin: RejoinConfig {
            snapshot_every,
            spectator_delay: Duration::ZERO,
            key: crate::rejoin_config::RejoinKey::from_bytes(&[3; 32]).unwrap(),
            ..RejoinConfig::default()
        },
        ..RelayConfig::default()
    }
}

/// A base as a `Resume` or `Reoffer` names it: turn, hash, length.
pub(super) type Offer = Option<(Turn, StateHash, u32)>;

/// The snapshot a `Resume` announces and the bytes of the chunks after it.
pub(super) fn resumed(got: &[ToPeer]) -> (Offer, Vec<u8>) {
    let snapshot = got.iter().find_map(|m| match m {
        ToPeer::Resume(r) => Some(r.snapshot),
        _ => None,
    });
    let bytes = got
        .iter()
        .filter_map(|m| match m {
            ToPeer::SnapshotChunk(c) => Some(c.bytes.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    (snapshot.flatten(), bytes)
}
