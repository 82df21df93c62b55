//! "Use it for your own game", the README's guide, as code that compiles
//! and runs (`tests/tests/guide.rs` plays it through a real relay): a small
//! game of its own, `Paint`, written against the public API only, and the
//! glue a game needs to play it over the network.
//!
//! Run it against a relay (`relay serve --bind 127.0.0.1:7777`), once per
//! player:
//!
//! ```text
//! cargo run -p lockstep-tests --example own_game -- 127.0.0.1:7777 2
//! ```
// --- guide: game ---
use serde::{Deserialize, Serialize};
use sim::{MatchSetup, PlayerId, SectionHash, Simulation, SnapshotError, Stamped, StateHash, Turn};

/// Side of the square, wrapping board.
const SIZE: u8 = 16;

/// A player's command: move one cell (each axis clamped to -1..=1).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Command {
    /// Move by `dx`, `dy`.
    Move {
        /// Horizontal step.
        dx: i8,
        /// Vertical step.
        dy: i8,
    },
}

/// Every player walks a wrapping board and paints the cells it stands on;
/// the most cells painted wins.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Paint {
    turn: u32,
    /// Each player's cell, in slot order.
    pos: Vec<(u8, u8)>,
    /// Owner + 1 of each cell (0: unpainted), row by row.
    cells: Vec<u8>,
}

impl Paint {
    /// Cells painted by `player`.
    #[must_use]
    #[allow(dead_code)] // for the reader's game UI; `main` prints only the hash
    pub fn score(&self, player: PlayerId) -> usize {
        self.cells.iter().filter(|&&c| c == player.0 + 1).count()
    }

    /// Where `player` stands.
    #[must_use]
    pub fn position(&self, player: PlayerId) -> Option<(u8, u8)> {
        self.pos.get(usize::from(player.0)).copied()
    }

    fn paint(&mut self) {
        for (p, &(x, y)) in self.pos.iter().enumerate() {
            let owner = u8::try_from(p + 1).unwrap_or(0);
            self.cells[usize::from(y) * usize::from(SIZE) + usize::from(x)] = owner;
        }
    }
}

impl Simulation for Paint {
    type Command = Command;
    const GAME_ID: &'static str = "paint";
    const GAME_VERSION: u32 = 1;

    fn new(setup: &MatchSetup) -> Self {
        // Start cells from the match seed: every peer gets the same setup.
        let pos = (0..setup.players)
            .map(|p| {
                let s = setup.seed.wrapping_add(u64::from(p) * 0x9e37_79b9);
                (
                    (s % u64::from(SIZE)) as u8,
                    ((s >> 8) % u64::from(SIZE)) as u8,
                )
            })
            .collect();
        let mut world = Self {
            turn: 0,
            pos,
            cells: vec![0; usize::from(SIZE) * usize::from(SIZE)],
        };
        world.paint();
        world
    }

    fn rules_hash(&self) -> StateHash {
        sim::hash::digest_of(&(Self::GAME_ID, SIZE), &mut Vec::new())
    }

    fn step(&mut self, _turn: Turn, inputs: &[Stamped<Command>]) {
        // Inputs come in canonical order (player, then sequence); a command
        // of a player outside the match cannot occur (the decode drops it),
        // and out-of-range values are clamped the same way on every peer.
        for s in inputs {
            let Some(at) = self.pos.get_mut(usize::from(s.player.0)) else {
                continue;
            };
            let Command::Move { dx, dy } = s.command;
            let step = |v: u8, d: i8| {
                let d = i16::from(d.clamp(-1, 1));
                (i16::from(v) + d).rem_euclid(i16::from(SIZE)) as u8
            };
            *at = (step(at.0, dx), step(at.1, dy));
        }
        self.paint();
        self.turn += 1;
    }

    fn state_hash(&self) -> StateHash {
        sim::hash::combine(&self.section_hashes())
    }

    fn section_hashes(&self) -> Vec<SectionHash> {
        let mut buf = Vec::new();
        vec![
            SectionHash {
                name: "players".into(),
                hash: sim::hash::digest_of(&(self.turn, &self.pos), &mut buf),
            },
            SectionHash {
                name: "cells".into(),
                hash: sim::hash::digest_of(&self.cells, &mut buf),
            },
        ]
    }

    fn snapshot(&self) -> Vec<u8> {
        postcard::to_allocvec(self).unwrap_or_default()
    }

    fn restore(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let w: Self =
            postcard::from_bytes(bytes).map_err(|e| SnapshotError::Decode(e.to_string()))?;
        if w.cells.len() != usize::from(SIZE) * usize::from(SIZE) {
            return Err(SnapshotError::Invalid("board size".into()));
        }
        Ok(w)
    }
}
// --- end guide: game ---

// --- guide: glue ---
use lockstep::Duration;
use lockstep::peer::udp::UdpPeer;
use lockstep::peer::{PeerBuilder, PeerEvent};
use std::io;
use std::net::{SocketAddr, UdpSocket};

/// Plays one match of `Paint` through the relay at `relay` as `builder`
/// says (match, players, turns, recording: the `with_*` options); `choose`
/// is the local player's input (keyboard, AI, ...). Returns the last turn
/// and its state hash.
pub fn play(
    relay: SocketAddr,
    builder: PeerBuilder<Paint>,
    mut choose: impl FnMut(&Paint, PlayerId) -> Vec<Command>,
) -> io::Result<(Turn, StateHash)> {
    let socket = UdpSocket::bind((relay.ip(), 0))?;
    let mut net = UdpPeer::new(socket, relay, builder).map_err(io::Error::other)?;
    let mut last = None;
    while !net.peer().is_done() {
        net.pump(Duration::from_millis(16))?; // one frame of I/O
        let now = net.now();
        while let Some(event) = net.peer_mut().poll_event() {
            match event {
                PeerEvent::TurnReady { turn, hash, .. } => {
                    last = Some((turn, hash)); // the world is stepped: render it here
                    let peer = net.peer_mut();
                    let commands = match (peer.world(), peer.player()) {
                        (Some(world), Some(me)) => choose(world, me),
                        _ => Vec::new(),
                    };
                    peer.submit(now, &commands).map_err(io::Error::other)?;
                }
                PeerEvent::Desync { turn, .. } => eprintln!("desync at turn {turn}"),
                PeerEvent::Refused { reason, .. } => {
                    return Err(io::Error::other(reason.to_string()));
                }
                PeerEvent::ConnectionLost { .. } => return Err(io::Error::other("relay lost")),
                _ => {}
            }
        }
    }
    let until = net.now() + Duration::from_secs(2); // let the last hashes reach the relay
    while !net.peer().is_flushed() && net.now() < until {
        net.pump(Duration::from_millis(16))?;
    }
    last.ok_or_else(|| io::Error::other("the match ended before its first turn"))
}
// --- end guide: glue ---

/// A simple player: walks diagonally, turning every few cells.
#[must_use]
pub fn wanderer(world: &Paint, me: PlayerId) -> Vec<Command> {
    let (x, y) = world.position(me).unwrap_or_default();
    let dx = if (x / 4) % 2 == 0 { 1 } else { -1 };
    vec![Command::Move {
        dx,
        dy: if y % 3 == 0 { 1 } else { 0 },
    }]
}

#[allow(dead_code)] // `tests/tests/guide.rs` includes this file and calls `play` itself
fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let relay = args.next().unwrap_or_else(|| "127.0.0.1:7777".into());
    let players = args.next().unwrap_or_else(|| "2".into());
    let (Ok(relay), Ok(players)) = (relay.parse::<SocketAddr>(), players.parse::<u8>()) else {
        eprintln!("usage: own_game [RELAY_ADDR] [PLAYERS]");
        return std::process::ExitCode::from(2);
    };
    let builder = PeerBuilder::new("paint", players).with_turns(300);
    match play(relay, builder, wanderer) {
        Ok((turn, hash)) => {
            println!("turn {turn}: {hash}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("own_game: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
