//! Random access by turn: [`seek()`] rebuilds the world at any turn from the
//! nearest earlier keyframe, found through the keyframe index so nothing
//! before it is read, and [`reindex()`] adds keyframes to a replay that has
//! none (the relay's recordings) so seeking is fast on any file.

use crate::Record;
use crate::error::{LastTurn, ReplayError};
use crate::reader::{ReadSummary, Reader};
use crate::verify::{Replayer, check_game, restore_checked};
use crate::writer::{Sink, SyncPolicy, Writer};
use sim::{PlayerId, Simulation, StateHash, Turn};
use std::io::{Read, Seek};

/// How many turns past the target a late hash record is still looked for.
const HASH_LAG: u32 = 64;

/// The world at a requested turn, and how it was obtained.
pub struct Seeked<S> {
    /// The world after stepping `turn`.
    pub world: S,
    /// The turn.
    pub turn: Turn,
    /// The keyframe it started from (`None`: from the match start).
    pub keyframe: Option<Turn>,
    /// Turns simulated after the keyframe.
    pub simulated: u32,
    /// The hash recorded for `turn`, if the file has one.
    pub recorded_hash: Option<StateHash>,
}

type TurnInputs = Vec<(PlayerId, Vec<u8>)>;

/// Rebuilds the world after stepping `target`: jumps to the latest keyframe
/// at or before it listed by the file's keyframe index (its cost is the
/// distance from that keyframe, not from turn 0), restores it (checked
/// against its recorded hash), then simulates the remaining turns. A file
/// without an index (unfinished, cut) or without a keyframe at or before
/// `target` is read from the start, as [`seek_stream`] does.
pub fn seek<S: Simulation, R: Read + Seek>(
    mut reader: Reader<R>,
    target: Turn,
) -> Result<Seeked<S>, ReplayError> {
    check_game::<S>(reader.header())?;
    let header = reader.header().clone();
    let nearest = reader
        .keyframe_index()?
        .and_then(|index| index.into_iter().rev().find(|k| k.turn <= target));
    let Some(keyframe) = nearest else {
        return seek_stream(reader, target);
    };
    reader.jump_to(keyframe.offset)?;
    match reader.next() {
        Some(Ok(Record::Keyframe {
            turn,
            hash,
            snapshot,
        })) if turn == keyframe.turn && hash == keyframe.hash => {
            seek_from(reader, &header, target, Some((turn, hash, snapshot)))
        }
        Some(Err(e)) => Err(e),
        _ => Err(ReplayError::Sequence {
            offset: keyframe.offset,
            reason: format!(
                "the keyframe index lists a keyframe of turn {} here, the record is not it",
                keyframe.turn
            ),
        }),
    }
}

/// [`seek()`] for a reader that cannot seek (a pipe): reads every record
/// from the start, simulating only from the latest keyframe at or before
/// `target`.
pub fn seek_stream<S: Simulation, R: Read>(
    reader: Reader<R>,
    target: Turn,
) -> Result<Seeked<S>, ReplayError> {
    check_game::<S>(reader.header())?;
    let header = reader.header().clone();
    seek_from(reader, &header, target, None)
}

/// Reads on from `reader`'s position to `target`, starting from `base` (a
/// keyframe already read) or from the latest keyframe it meets.
fn seek_from<S: Simulation, R: Read>(
    mut reader: Reader<R>,
    header: &crate::Header,
    target: Turn,
    mut base: Option<(Turn, StateHash, Vec<u8>)>,
) -> Result<Seeked<S>, ReplayError> {
    let mut start: Option<(StateHash, Vec<u8>)> = None;
    let mut pending: Vec<(Turn, TurnInputs)> = Vec::new();
    let mut reached = false;
    let mut recorded_hash = None;
    let mut last_turn = None;

    for item in reader.by_ref() {
        let record = match item {
            Ok(r) => r,
            // Whatever came before the damage is intact and usable.
            Err(e) if e.is_damage() => break,
            Err(e) => return Err(e),
        };
        match record {
            Record::Turn { turn, inputs } => {
                last_turn = Some(turn);
                if turn <= target {
                    pending.push((turn, inputs));
                } else {
                    reached = true;
                    if turn.0 > target.0.saturating_add(HASH_LAG) || recorded_hash.is_some() {
                        break;
                    }
                }
            }
            Record::Keyframe {
                turn,
                hash,
                snapshot,
            } if turn <= target && base.as_ref().is_none_or(|(t, _, _)| *t < turn) => {
                pending.retain(|(t, _)| *t > turn);
                base = Some((turn, hash, snapshot));
            }
            Record::Start { hash, snapshot } => start = Some((hash, snapshot)),
            Record::Hash { turn, hash } if turn == target => {
                recorded_hash = Some(hash);
                if reached {
                    break;
                }
            }
            Record::Trailer { final_turn, .. } if final_turn >= target => reached = true,
            _ => {}
        }
    }
    if !reached && last_turn != Some(target) {
        return Err(ReplayError::NoSuchTurn {
            turn: target,
            last: LastTurn(last_turn),
        });
    }

    let (mut rp, keyframe) = match base {
        Some((turn, hash, snapshot)) => {
            let world = restore_checked::<S>(turn, &snapshot, hash)?;
            (
                Replayer::from_world(world, turn.0 + 1, header.setup.players),
                Some(turn),
            )
        }
        None => {
            let mut rp = Replayer::<S>::start(header)?;
            if let Some((hash, snapshot)) = start {
                rp.begin_from(&snapshot, hash)?;
            }
            (rp, None)
        }
    };
    for (turn, inputs) in &pending {
        rp.step(*turn, inputs, |_, _| {})?;
    }
    if rp.current() != Some(target) {
        // The target lies in a gap after the last recorded turn before it.
        rp.step(target, &[], |_, _| {})?;
    }
    Ok(Seeked {
        world: rp.world,
        turn: target,
        keyframe,
        simulated: rp.simulated,
        recorded_hash,
    })
}

/// What [`reindex()`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReindexReport {
    /// Turns copied.
    pub turns: u32,
    /// Keyframes written.
    pub keyframes: u32,
    /// How the source file ended (a damaged source gives an output without trailer).
    pub source: ReadSummary,
}

/// Copies `reader`'s replay into `sink`, re-simulating it with game `S` and
/// writing a keyframe after every turn divisible by `every` (old keyframes
/// are replaced). Every recorded hash is checked on the way: a replay that
/// does not verify is refused, since its keyframes would be wrong.
pub fn reindex<S: Simulation, R: Read, W: Sink>(
    mut reader: Reader<R>,
    sink: W,
    every: u32,
) -> Result<(W, ReindexReport), ReplayError> {
    let every = every.max(1);
    let mut rp = Replayer::<S>::start(reader.header())?;
    let mut w = Writer::new(sink, reader.header(), SyncPolicy::AtFinish)?;
    let mut keyframes = 0;
    let mut hashes: std::collections::VecDeque<(Turn, StateHash)> = Default::default();
    let mut finished = false;
    for item in reader.by_ref() {
        let record = match item {
            Ok(r) => r,
            Err(e) if e.is_damage() => break,
            Err(e) => return Err(e),
        };
        match record {
            Record::Turn { turn, inputs } => {
                rp.step(turn, &inputs, |t, world| {
                    if hashes.len() == 4096 {
                        hashes.pop_front();
                    }
                    hashes.push_back((t, world.state_hash()));
                })?;
                w.record_turn(turn, &inputs)?;
                if turn.0 % every == 0 {
                    let hash = rp.world.state_hash();
                    w.record_keyframe(turn, &rp.world.snapshot(), hash)?;
                    keyframes += 1;
                }
            }
            Record::Hash { turn, hash } => {
                if let Some((_, actual)) = hashes.iter().find(|(t, _)| *t == turn)
                    && *actual != hash
                {
                    return Err(ReplayError::Diverged {
                        turn,
                        expected: hash,
                        actual: *actual,
                    });
                }
                w.record_hash(turn, hash)?;
            }
            Record::Desync {
                turn,
                hashes: h,
                sections,
            } => w.record_desync(turn, &h, &sections)?,
            Record::Start { hash, snapshot } => {
                rp.begin_from(&snapshot, hash)?;
                w.record_start(&snapshot, hash)?;
            }
            Record::Dispute {
                turn,
                majority,
                dissent,
            } => w.record_dispute(turn, majority, &dissent)?,
            Record::Drop { player, turn } => w.record_drop(player, turn)?,
            Record::Forensics(report) => w.record_forensics(&report)?,
            Record::Rejoin { player, turn } => w.record_rejoin(player, turn)?,
            Record::Match(facts) => w.record_match(&facts)?,
            Record::End { reason } => w.record_end(&reason)?,
            Record::DelayChange { delay, from_turn } => w.record_delay_change(delay, from_turn)?,
            Record::Trailer {
                final_turn,
                final_hash,
                ..
            } => {
                w.finish(final_turn, final_hash)?;
                finished = true;
            }
            Record::Header(_) | Record::Keyframe { .. } | Record::KeyframeIndex(_) => {}
        }
    }
    if !finished {
        w.abandon()?;
    }
    let turns = w.turns_written();
    Ok((
        w.into_inner()?,
        ReindexReport {
            turns,
            keyframes,
            source: reader.summary().clone(),
        },
    ))
}
