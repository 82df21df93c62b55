//! Recording a match of the reference game played by `sim::bot::Bot`s, the
//! way the relay or `peer --record` would: for fixtures, tests and benchmarks.

use crate::error::ReplayError;
use crate::format::{Header, PlayerInfo};
use crate::writer::{Sink, SyncPolicy, Writer};
use sim::game::{Command, World};
use sim::{PlayerId, Simulation, StateHash, Turn};

/// How [`record_bot_match`] lays out the recording.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Turns to play.
    pub turns: u32,
    /// Keyframe after every turn divisible by this (0: none, like the relay).
    pub keyframe_every: u32,
    /// Hash records trail turn records by this many turns (the relay's agreement lag).
    pub hash_lag: u32,
    /// Record the initial world as a start state (needed when it is not `World::new(setup)`).
    pub start_state: bool,
    /// Bots' actions per minute.
    pub apm: u32,
    /// Seed of the bots.
    pub bot_seed: u64,
    /// Match name in the header.
    pub match_name: String,
    /// Start time in the header (fixed in fixtures so their output is stable).
    pub start_time_unix_ms: u64,
    /// Input delay recorded at turn 0, if any.
    pub delay: Option<u32>,
    /// A player who leaves at a turn (sends nothing from then on).
    pub drop: Option<(PlayerId, Turn)>,
    /// Corrupt the recorder's world after this turn (a desync the replay will show).
    pub perturb_at: Option<Turn>,
    /// The relay's view of a desync: this player's world is corrupted after
    /// this turn while the recorder's (the majority's) is not. From then on
    /// every hash record is the majority's and a dispute record names the
    /// player's own hash; the first one also gets a desync record with the
    /// differing sections, as the relay records them. Use with `hash_lag` 0.
    pub dissent_from: Option<(PlayerId, Turn)>,
    /// fsync policy of the writer.
    pub sync: SyncPolicy,
}

impl Default for RecordOptions {
    fn default() -> Self {
        Self {
            turns: 300,
            keyframe_every: 50,
            hash_lag: 0,
            start_state: false,
            apm: 300,
            bot_seed: 1,
            match_name: "bot match".into(),
            start_time_unix_ms: 1_767_225_600_000,
            delay: None,
            drop: None,
            perturb_at: None,
            dissent_from: None,
            sync: SyncPolicy::AtFinish,
        }
    }
}

/// Plays `world` with one bot per player for `opts.turns` turns and records it
/// into `sink`. Returns the sink and the final state hash.
pub fn record_bot_match<W: Sink>(
    sink: W,
    mut world: World,
    opts: &RecordOptions,
) -> Result<(W, StateHash), ReplayError> {
    let setup = world.setup().clone();
    let mut header = Header::for_game(&world, &setup);
    header.protocol_version = 1;
    header.match_name.clone_from(&opts.match_name);
    header.start_time_unix_ms = opts.start_time_unix_ms;
    header.players = (0..setup.players)
        .map(|p| PlayerInfo {
            id: PlayerId(p),
            name: format!("bot-{p}"),
        })
        .collect();
    let mut w = Writer::new(sink, &header, opts.sync)?;
    if opts.start_state {
        w.record_start(&world.snapshot(), world.state_hash())?;
    }
    if let Some(d) = opts.delay {
        w.record_delay_change(d, Turn(0))?;
    }
    let mut bots = sim::scenarios::bots(&world, opts.bot_seed, opts.apm);
    let mut hashes: Vec<StateHash> = Vec::new();
    // The dissenting player's own world and its hashes, once it diverged.
    let mut odd_world: Option<World> = None;
    let mut first_desync: Option<Vec<(PlayerId, StateHash)>> = None;
    let mut desync_sections: Vec<String> = Vec::new();
    for t in 0..opts.turns {
        let turn = Turn(t);
        let mut inputs: Vec<(PlayerId, Vec<u8>)> = Vec::new();
        for bot in &mut bots {
            let commands = bot.think(&world, turn);
            if opts
                .drop
                .is_some_and(|(p, at)| p == bot.player() && turn >= at)
            {
                continue;
            }
            let mut bytes = Vec::new();
            sim::encode_commands(&commands, &mut bytes);
            inputs.push((bot.player(), bytes));
        }
        if let Some((p, at)) = opts.drop
            && at == turn
        {
            w.record_drop(p, at)?;
        }
        w.record_turn(turn, &inputs)?;
        // Step with what was recorded, decoded exactly as every peer would.
        let stamped = sim::decode_turn::<Command>(&inputs, setup.players).commands;
        world.step(turn, &stamped);
        if let Some(odd) = odd_world.as_mut() {
            odd.step(turn, &stamped);
        }
        if opts.perturb_at == Some(turn) {
            world.perturb(t);
        }
        if let Some((odd_player, at)) = opts.dissent_from
            && at == turn
        {
            let mut odd = world.clone();
            odd.perturb(t);
            let sections =
                crate::verify::compare_sections(&world.section_hashes(), &odd.section_hashes());
            let mut all: Vec<(PlayerId, StateHash)> = (0..setup.players)
                .map(|p| (PlayerId(p), world.state_hash()))
                .collect();
            if let Some(slot) = all.iter_mut().find(|(p, _)| *p == odd_player) {
                slot.1 = odd.state_hash();
            }
            desync_sections = sections.into_iter().map(|s| s.name).collect();
            first_desync = Some(all);
            odd_world = Some(odd);
        }
        let hash = world.state_hash();
        hashes.push(hash);
        if let (Some(odd), Some((odd_player, _))) = (&odd_world, opts.dissent_from) {
            w.record_hash(turn, hash)?;
            w.record_dispute(turn, Some(hash), &[(odd_player, odd.state_hash())])?;
            // The relay writes the first desync once its section probe is back.
            if let Some(all) = first_desync.take() {
                w.record_desync(turn, &all, &desync_sections)?;
            }
        } else if t >= opts.hash_lag {
            let ht = t - opts.hash_lag;
            w.record_hash(Turn(ht), hashes[ht as usize])?;
        }
        if opts.keyframe_every > 0 && t % opts.keyframe_every == 0 {
            w.record_keyframe(turn, &world.snapshot(), hash)?;
        }
    }
    for ht in opts.turns.saturating_sub(opts.hash_lag)..opts.turns {
        w.record_hash(Turn(ht), hashes[ht as usize])?;
    }
    let final_hash = world.state_hash();
    w.finish(Turn(opts.turns.saturating_sub(1)), final_hash)?;
    Ok((w.into_inner()?, final_hash))
}
