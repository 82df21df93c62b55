//! A tiny deterministic game implementing `sim::Simulation`, so the format,
//! verify, seek and diff can be tested without the reference game.

use replays::{Header, SyncPolicy, Writer};
use serde::{Deserialize, Serialize};
use sim::{
    MatchSetup, PlayerId, SectionHash, Simulation, SnapshotError, Stamped, StateHash, Turn,
    canonical_order,
};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum ToyCmd {
    Add { slot: u8, amount: i32 },
    Scramble,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Toy {
    tick: u32,
    ticks_per_turn: u16,
    players: u8,
    vals: Vec<i64>,
    rng: u64,
}

const SLOTS: usize = 4;

impl Toy {
    fn next_rng(&mut self) -> u64 {
        self.rng = self
            .rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.rng >> 33
    }
}

fn digest(bytes: &[u8]) -> StateHash {
    StateHash(*blake3::hash(bytes).as_bytes())
}

impl Simulation for Toy {
    type Command = ToyCmd;
    const GAME_ID: &'static str = "toy";
    const GAME_VERSION: u32 = 1;

    fn new(setup: &MatchSetup) -> Self {
        Self {
            tick: 0,
            ticks_per_turn: setup.ticks_per_turn,
            players: setup.players,
            vals: vec![0; usize::from(setup.players) * SLOTS],
            rng: setup.seed,
        }
    }

    fn rules_hash(&self) -> StateHash {
        digest(b"toy rules v1")
    }

    fn step(&mut self, _turn: Turn, inputs: &[Stamped<ToyCmd>]) {
        let mut inputs = inputs.to_vec();
        canonical_order(&mut inputs);
        for s in &inputs {
            let base = usize::from(s.player.0) * SLOTS;
            match &s.command {
                ToyCmd::Add { slot, amount } => {
                    if let Some(v) = self.vals.get_mut(base + usize::from(*slot) % SLOTS) {
                        *v = v.wrapping_add(i64::from(*amount));
                    }
                }
                ToyCmd::Scramble => {
                    let r = self.next_rng();
                    if let Some(v) = self.vals.get_mut(base + (r as usize) % SLOTS) {
                        *v ^= 0x55;
                    }
                }
            }
        }
        for _ in 0..self.ticks_per_turn {
            self.tick += 1;
            let r = self.next_rng() as usize;
            let len = self.vals.len().max(1);
            if let Some(v) = self.vals.get_mut(r % len) {
                *v += 1;
            }
        }
    }

    fn state_hash(&self) -> StateHash {
        let mut h = blake3::Hasher::new();
        for s in self.section_hashes() {
            h.update(&s.hash.0);
        }
        StateHash(*h.finalize().as_bytes())
    }

    fn section_hashes(&self) -> Vec<SectionHash> {
        let mut out = vec![SectionHash {
            name: "globals".into(),
            hash: digest(&postcard::to_allocvec(&(self.tick, self.rng)).unwrap()),
        }];
        for p in 0..self.players {
            let base = usize::from(p) * SLOTS;
            out.push(SectionHash {
                name: format!("player {p}"),
                hash: digest(&postcard::to_allocvec(&self.vals[base..base + SLOTS]).unwrap()),
            });
        }
        out
    }

    fn snapshot(&self) -> Vec<u8> {
        postcard::to_allocvec(self).unwrap()
    }

    fn restore(bytes: &[u8]) -> Result<Self, SnapshotError> {
        postcard::from_bytes(bytes).map_err(|e| SnapshotError::Decode(e.to_string()))
    }
}

pub fn setup(players: u8) -> MatchSetup {
    MatchSetup {
        seed: 42,
        players,
        ticks_per_turn: 3,
    }
}

pub fn header(players: u8) -> Header {
    let setup = setup(players);
    let mut h = Header::for_game(&Toy::new(&setup), &setup);
    h.protocol_version = 1;
    h.match_name = "toy match".into();
    h.start_time_unix_ms = 1_700_000_000_000;
    h
}

/// Deterministic per-turn inputs: some players issue commands on some turns.
pub fn inputs_for(turn: Turn, players: u8) -> Vec<(PlayerId, Vec<u8>)> {
    (0..players)
        .map(|p| {
            let mut cmds = Vec::new();
            if (turn.0 + u32::from(p)) % 3 == 0 {
                cmds.push(ToyCmd::Add {
                    slot: (turn.0 % 4) as u8,
                    amount: turn.0 as i32 * (i32::from(p) + 1),
                });
            }
            if (turn.0 * 7 + u32::from(p)) % 11 == 0 {
                cmds.push(ToyCmd::Scramble);
            }
            let mut bytes = Vec::new();
            sim::encode_commands(&cmds, &mut bytes);
            (PlayerId(p), bytes)
        })
        .collect()
}

/// How a recording should be laid out.
#[derive(Clone, Copy)]
pub struct Plan {
    pub players: u8,
    pub turns: u32,
    /// Keyframe every k turns (0: none).
    pub keyframe_every: u32,
    /// Hash records lag the turn records by this many turns (relay style).
    pub hash_lag: u32,
    pub finish: bool,
}

impl Default for Plan {
    fn default() -> Self {
        Self {
            players: 2,
            turns: 40,
            keyframe_every: 10,
            hash_lag: 0,
            finish: true,
        }
    }
}

/// Plays a match with the toy game and records it; `tamper(turn, inputs)` may
/// change the recorded inputs after they were simulated.
pub fn record(plan: Plan, mut tamper: impl FnMut(Turn, &mut Vec<(PlayerId, Vec<u8>)>)) -> Vec<u8> {
    let mut world = Toy::new(&setup(plan.players));
    let mut w = Writer::new(Vec::new(), &header(plan.players), SyncPolicy::AtFinish).unwrap();
    let mut hashes = Vec::new();
    for t in 0..plan.turns {
        let turn = Turn(t);
        let mut inputs = inputs_for(turn, plan.players);
        // Decoded as every peer decodes a turn.
        let decoded = sim::decode_turn::<ToyCmd>(&inputs, plan.players);
        assert_eq!((decoded.rejected, decoded.invalid_players), (0, 0));
        world.step(turn, &decoded.commands);
        hashes.push(world.state_hash());
        tamper(turn, &mut inputs);
        w.record_turn(turn, &inputs).unwrap();
        if t >= plan.hash_lag {
            let ht = t - plan.hash_lag;
            w.record_hash(Turn(ht), hashes[ht as usize]).unwrap();
        }
        if plan.keyframe_every > 0 && t % plan.keyframe_every == 0 {
            w.record_keyframe(turn, &world.snapshot(), world.state_hash())
                .unwrap();
        }
    }
    if plan.finish {
        for ht in plan.turns.saturating_sub(plan.hash_lag)..plan.turns {
            w.record_hash(Turn(ht), hashes[ht as usize]).unwrap();
        }
        let last = Turn(plan.turns - 1);
        w.finish(last, world.state_hash()).unwrap();
    }
    w.into_inner().unwrap()
}

/// The world after stepping `target`, simulated from the start.
pub fn simulate_to(players: u8, target: Turn) -> Toy {
    let mut world = Toy::new(&setup(players));
    for t in 0..=target.0 {
        let decoded = sim::decode_turn::<ToyCmd>(&inputs_for(Turn(t), players), players);
        world.step(Turn(t), &decoded.commands);
    }
    world
}
