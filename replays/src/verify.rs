//! Re-simulation of a replay: [`verify()`] steps a fresh world through every
//! recorded turn and compares every recorded hash, reporting the first
//! divergence with the sections that differ, and lists the desyncs the
//! recording holds (turns whose players' hashes disagreed during the match).

use crate::Record;
use crate::error::ReplayError;
use crate::format::Header;
use crate::reader::{ReadSummary, Reader};
use sim::{PlayerId, SectionHash, Simulation, StateHash, Turn};
use std::collections::{BTreeMap, VecDeque};
use std::io::Read;

/// How many recent computed hashes are kept for hash records that arrive late.
const HASH_WINDOW: usize = 4096;

/// Where verification is, passed to the progress callback after every turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Turn just simulated.
    pub turn: Turn,
    /// Bytes of the file read so far.
    pub position: u64,
    /// Hash of the re-simulated world after `turn`.
    pub hash: StateHash,
}

/// One section that differs between the recorded and the re-simulated state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SectionDiff {
    /// Section name.
    pub name: String,
    /// Recorded section hash (from a keyframe), if known.
    pub expected: Option<StateHash>,
    /// Re-simulated section hash, if known.
    pub actual: Option<StateHash>,
}

/// Which recorded value disagreed first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DivergenceSource {
    /// A hash record.
    Hash,
    /// A keyframe's hash.
    Keyframe,
    /// The trailer's final hash.
    Trailer,
}

/// The first turn where the re-simulation disagrees with the recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// The turn.
    pub turn: Turn,
    /// Hash recorded in the file.
    pub expected: StateHash,
    /// Hash of the re-simulated world.
    pub actual: StateHash,
    /// Which record held the expected hash.
    pub source: DivergenceSource,
    /// Sections that differ (from a keyframe compared section by section, or
    /// named by a recorded desync); empty when the file has neither.
    pub sections: Vec<SectionDiff>,
    /// The turn the sections were compared at (the divergence turn or the
    /// first keyframe after it).
    pub sections_turn: Option<Turn>,
}

/// A turn whose players reported different hashes during the match, as the
/// recording holds it (from its dispute record, and for the first desync also
/// its desync record with the differing sections).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedDesync {
    /// The turn.
    pub turn: Turn,
    /// The hash a strict majority reported (the one verification checks);
    /// `None` when there was none.
    pub majority: Option<StateHash>,
    /// The odd players and their hashes; every reporter when there was no majority.
    pub dissent: Vec<(PlayerId, StateHash)>,
    /// Sections known to differ (recorded for the first desync only).
    pub sections: Vec<String>,
}

impl RecordedDesync {
    /// From a desync record alone (files written before dispute records
    /// existed): the majority is worked out from the listed hashes.
    fn from_desync(turn: Turn, hashes: &[(PlayerId, StateHash)], sections: Vec<String>) -> Self {
        let majority = hashes
            .iter()
            .map(|(_, h)| *h)
            .find(|h| hashes.iter().filter(|(_, x)| x == h).count() * 2 > hashes.len());
        Self {
            turn,
            majority,
            dissent: hashes
                .iter()
                .filter(|(_, h)| majority != Some(*h))
                .copied()
                .collect(),
            sections,
        }
    }
}

impl RecordedDesync {
    /// The players outside the majority (every reporter when there was none).
    #[must_use]
    pub fn odd_players(&self) -> Vec<PlayerId> {
        self.dissent.iter().map(|(p, _)| *p).collect()
    }
}

/// Collects the desyncs of a recording from its dispute and desync records.
#[derive(Debug, Default)]
struct DesyncLog(BTreeMap<Turn, RecordedDesync>);

impl DesyncLog {
    fn note(&mut self, record: Record) {
        match record {
            Record::Desync {
                turn,
                hashes,
                sections,
            } => {
                if let Some(d) = self.0.get_mut(&turn) {
                    d.sections = sections;
                } else {
                    self.0
                        .insert(turn, RecordedDesync::from_desync(turn, &hashes, sections));
                }
            }
            Record::Dispute {
                turn,
                majority,
                dissent,
            } => {
                // A dispute record is the authority on who was odd; a desync
                // record of the same turn only adds its sections.
                let sections = self.0.remove(&turn).map(|d| d.sections).unwrap_or_default();
                self.0.insert(
                    turn,
                    RecordedDesync {
                        turn,
                        majority,
                        dissent,
                        sections,
                    },
                );
            }
            _ => {}
        }
    }

    fn into_list(self) -> Vec<RecordedDesync> {
        self.0.into_values().collect()
    }
}

/// Reads a whole recording (without re-simulating) and lists the desyncs it
/// holds, for `replay info`; a damaged file is read up to its last intact record.
pub fn recorded_desyncs<R: Read>(
    mut reader: Reader<R>,
) -> Result<(Header, ReadSummary, Vec<RecordedDesync>), ReplayError> {
    let mut log = DesyncLog::default();
    let header = reader.header().clone();
    for item in reader.by_ref() {
        match item {
            Ok(r) => log.note(r),
            Err(e) if e.is_damage() => break,
            Err(e) => return Err(e),
        }
    }
    Ok((header, reader.summary().clone(), log.into_list()))
}

/// The outcome of [`verify()`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyReport {
    /// Turns simulated (gaps included).
    pub turns: u32,
    /// Last turn simulated.
    pub last_turn: Option<Turn>,
    /// Recorded hashes (hash records, keyframes, trailer) compared.
    pub hashes_checked: u32,
    /// Hash records too far behind their turn to compare.
    pub hashes_unchecked: u32,
    /// Keyframes whose snapshot restored to their recorded hash.
    pub keyframes_checked: u32,
    /// Player inputs that did not decode and counted as empty.
    pub rejected_inputs: u32,
    /// Input entries stamped with a player outside the match, dropped unread
    /// as every peer drops them ([`sim::decode_turn`]); an honest relay never
    /// records one, so a non-zero count points at a forged or hostile file.
    pub invalid_player_inputs: u32,
    /// Turns with a recorded desync, in turn order (each turn once).
    pub recorded_desyncs: Vec<RecordedDesync>,
    /// Hash of the re-simulated world after the last turn.
    pub final_hash: Option<StateHash>,
    /// The first disagreement, if any.
    pub first_divergence: Option<Divergence>,
    /// What was read and how the file ends.
    pub summary: ReadSummary,
}

impl VerifyReport {
    /// True only when every recorded hash matched and the file is complete
    /// and undamaged. Recorded desyncs do not count against it: the hash
    /// records of a desynced turn are the majority's; see [`Self::clean`].
    #[must_use]
    pub fn verified(&self) -> bool {
        self.first_divergence.is_none() && self.summary.is_complete()
    }

    /// True when the recording is verified and holds no desync: every player
    /// agreed on every turn.
    #[must_use]
    pub fn clean(&self) -> bool {
        self.verified() && self.recorded_desyncs.is_empty()
    }
}

/// The most consecutive missing turns a replay may skip (simulated as empty).
///
/// The relay and peers record every turn, so a real file has no gaps at all;
/// one minute of 100 ms turns is a generous bound that still stops a forged
/// turn number near `u32::MAX` from making `verify` simulate for hours.
pub const MAX_TURN_GAP: u32 = 600;

/// Steps a world through recorded turns exactly as [`verify()`] does: the
/// peers' own decode (a rejected input counts as empty, a player outside
/// the match is dropped), gaps filled with empty turns, the rules hash
/// checked before the first step. Use it to re-simulate a recording turn by
/// turn yourself (a viewer, a tool that needs every world); [`verify()`] and
/// [`seek()`](crate::seek()) are built on it.
pub struct Replayer<S: Simulation> {
    pub(crate) world: S,
    /// Next turn to simulate.
    pub(crate) next: u32,
    pub(crate) rejected: u32,
    pub(crate) invalid_players: u32,
    pub(crate) simulated: u32,
    /// The match's player count: entries of other players are dropped, as
    /// every peer's [`sim::decode_turn`] drops them.
    players: u8,
    /// Rules hash to check before the first step (`None`: checked or not
    /// applicable), with the recorded setup's player count and ticks (its
    /// join fingerprint is accepted too).
    rules: Option<(StateHash, u8, u16)>,
}

impl<S: Simulation> Replayer<S> {
    /// A fresh world for `header`, after checking the game matches. The rules
    /// hash is checked before the first step, once a start record had its chance
    /// to replace the world.
    ///
    /// # Errors
    /// [`ReplayError::WrongGame`] when the file is of another game or version.
    pub fn start(header: &Header) -> Result<Self, ReplayError> {
        check_game::<S>(header)?;
        let mut rp = Self::from_world(S::new(&header.setup), 0, header.setup.players);
        rp.rules = Some((
            header.rules_hash,
            header.setup.players,
            header.setup.ticks_per_turn,
        ));
        Ok(rp)
    }

    /// Continues from `world`, the state after turn `next - 1` (a restored
    /// keyframe), in a match of `players` players. The rules hash is not
    /// checked again: the keyframe's recorded hash pins the state.
    #[must_use]
    pub const fn from_world(world: S, next: u32, players: u8) -> Self {
        Self {
            world,
            next,
            rejected: 0,
            invalid_players: 0,
            simulated: 0,
            players,
            rules: None,
        }
    }

    /// Replaces the initial world with a recorded start state (a scenario).
    ///
    /// # Errors
    /// The snapshot does not restore or does not hash to `hash`.
    pub fn begin_from(&mut self, snapshot: &[u8], hash: StateHash) -> Result<(), ReplayError> {
        self.world = restore_checked::<S>(Turn(0), snapshot, hash)?;
        Ok(())
    }

    /// The file's rules hash is this world's, or the rules fingerprint the
    /// players joined with ([`sim::rules_fingerprint`] of the recorded player
    /// count and ticks): a relay records the join's fingerprint for a game
    /// it does not know, and cannot recompute the game's rules hash for the
    /// real seed. Either one pins the rules; the game's code decides both.
    fn check_rules(&mut self) -> Result<(), ReplayError> {
        if let Some((file, players, ticks)) = self.rules.take() {
            let ours = self.world.rules_hash();
            if ours != file && sim::rules_fingerprint::<S>(players, ticks) != file {
                return Err(ReplayError::RulesMismatch { file, ours });
            }
        }
        Ok(())
    }

    /// Simulates empty turns up to `turn`, then `turn` with `inputs`.
    /// Calls `each` with every turn simulated and the world after it.
    ///
    /// # Errors
    /// [`ReplayError::RulesMismatch`] before the first step when the file's
    /// rules hash is not this game's; [`ReplayError::TurnGap`] for a gap
    /// longer than [`MAX_TURN_GAP`].
    pub fn step(
        &mut self,
        turn: Turn,
        inputs: &[(PlayerId, Vec<u8>)],
        mut each: impl FnMut(Turn, &S),
    ) -> Result<(), ReplayError> {
        self.check_rules()?;
        if turn.0.saturating_sub(self.next) > MAX_TURN_GAP {
            return Err(ReplayError::TurnGap {
                after: self.current(),
                got: turn,
                max: MAX_TURN_GAP,
            });
        }
        while self.next < turn.0 {
            let t = Turn(self.next);
            self.world.step(t, &[]);
            self.next += 1;
            self.simulated += 1;
            each(t, &self.world);
        }
        if turn.0 < self.next {
            // Older than the world: the reader already refuses decreasing turns.
            return Ok(());
        }
        // The peers' own decode: a rejected input counts as empty, exactly as
        // every peer did, and a player outside the match is dropped.
        let decoded = sim::decode_turn::<S::Command>(inputs, self.players);
        self.rejected = self.rejected.saturating_add(decoded.rejected);
        self.invalid_players = self.invalid_players.saturating_add(decoded.invalid_players);
        self.world.step(turn, &decoded.commands);
        self.next = turn.0 + 1;
        self.simulated += 1;
        each(turn, &self.world);
        Ok(())
    }

    /// The last simulated turn (`None` before the first).
    #[must_use]
    pub fn current(&self) -> Option<Turn> {
        self.next.checked_sub(1).map(Turn)
    }

    /// The world after [`current`](Self::current).
    #[must_use]
    pub const fn world(&self) -> &S {
        &self.world
    }

    /// Inputs the peers' decode rejected so far (each simulated as empty).
    #[must_use]
    pub const fn rejected_inputs(&self) -> u32 {
        self.rejected
    }
}

/// Restores a snapshot and checks it hashes to what was recorded with it
/// (a keyframe, a start record): the one check every reader of snapshots
/// in a recording makes.
///
/// # Errors
/// [`ReplayError::Snapshot`] when it does not restore,
/// [`ReplayError::KeyframeHash`] when it restores to another state.
pub fn restore_checked<S: Simulation>(
    turn: Turn,
    snapshot: &[u8],
    hash: StateHash,
) -> Result<S, ReplayError> {
    let world = S::restore(snapshot).map_err(|source| ReplayError::Snapshot { turn, source })?;
    let actual = world.state_hash();
    if actual != hash {
        return Err(ReplayError::KeyframeHash {
            turn,
            expected: hash,
            actual,
        });
    }
    Ok(world)
}

/// Refuses a replay of another game or game version.
pub(crate) fn check_game<S: Simulation>(header: &Header) -> Result<(), ReplayError> {
    if header.game_id != S::GAME_ID || header.game_version != S::GAME_VERSION {
        return Err(ReplayError::WrongGame {
            file: header.game_id.clone(),
            file_version: header.game_version,
            ours: S::GAME_ID.to_owned(),
            ours_version: S::GAME_VERSION,
        });
    }
    Ok(())
}

/// Compares two section lists by name.
#[must_use]
pub fn compare_sections(expected: &[SectionHash], actual: &[SectionHash]) -> Vec<SectionDiff> {
    let mut map: BTreeMap<&str, (Option<StateHash>, Option<StateHash>)> = BTreeMap::new();
    for s in expected {
        map.entry(&s.name).or_default().0 = Some(s.hash);
    }
    for s in actual {
        map.entry(&s.name).or_default().1 = Some(s.hash);
    }
    // Keep the game's section order where possible: expected first, then extra actual ones.
    let mut out = Vec::new();
    let order = expected
        .iter()
        .chain(actual.iter())
        .map(|s| s.name.as_str());
    for name in order {
        if let Some((e, a)) = map.remove(name)
            && e != a
        {
            out.push(SectionDiff {
                name: name.to_owned(),
                expected: e,
                actual: a,
            });
        }
    }
    out
}

/// Re-simulates `reader`'s match with game `S` and compares every recorded
/// hash. `progress` is called after every simulated turn.
///
/// A damaged or torn file is verified up to its last intact record; the
/// report's summary says how it ends. Only I/O failures and a replay of
/// another game are errors.
pub fn verify<S: Simulation, R: Read>(
    mut reader: Reader<R>,
    mut progress: impl FnMut(Progress),
) -> Result<VerifyReport, ReplayError> {
    let mut rp = Replayer::<S>::start(reader.header())?;
    let mut computed: VecDeque<(Turn, StateHash)> = VecDeque::new();
    let mut pending: BTreeMap<Turn, StateHash> = BTreeMap::new();
    let mut report = VerifyReport {
        turns: 0,
        last_turn: None,
        hashes_checked: 0,
        hashes_unchecked: 0,
        keyframes_checked: 0,
        rejected_inputs: 0,
        invalid_player_inputs: 0,
        recorded_desyncs: Vec::new(),
        final_hash: None,
        first_divergence: None,
        summary: reader.summary().clone(),
    };
    // After the first divergence the world is wrong: simulate on only until a
    // keyframe has shown which sections differ, then just read to the end.
    let mut simulating = true;
    let mut desyncs = DesyncLog::default();

    while let Some(item) = reader.next() {
        let record = match item {
            Ok(r) => r,
            Err(e) if e.is_damage() => break,
            Err(e) => return Err(e),
        };
        let position = reader.position();
        match record {
            Record::Turn { turn, inputs } if simulating => {
                let mut div: Option<Divergence> = None;
                rp.step(turn, &inputs, |t, w| {
                    let h = w.state_hash();
                    if computed.len() == HASH_WINDOW {
                        computed.pop_front();
                    }
                    computed.push_back((t, h));
                    if let Some(expected) = pending.remove(&t) {
                        report.hashes_checked += 1;
                        if expected != h && div.is_none() {
                            div = Some(divergence(t, expected, h, DivergenceSource::Hash));
                        }
                    }
                    progress(Progress {
                        turn: t,
                        position,
                        hash: h,
                    });
                })?;
                if report.first_divergence.is_none() {
                    report.first_divergence = div;
                }
            }
            Record::Hash { turn, hash } if simulating => match lookup(&computed, turn) {
                Some(actual) => {
                    report.hashes_checked += 1;
                    if actual != hash && report.first_divergence.is_none() {
                        report.first_divergence =
                            Some(divergence(turn, hash, actual, DivergenceSource::Hash));
                    }
                }
                None if rp.current().is_none_or(|c| turn > c) => {
                    pending.insert(turn, hash);
                }
                None => report.hashes_unchecked += 1,
            },
            Record::Keyframe {
                turn,
                hash,
                snapshot,
            } if simulating => {
                let restored = restore_checked::<S>(turn, &snapshot, hash)?;
                report.keyframes_checked += 1;
                if let Some(actual) = lookup(&computed, turn) {
                    report.hashes_checked += 1;
                    if actual != hash && report.first_divergence.is_none() {
                        report.first_divergence =
                            Some(divergence(turn, hash, actual, DivergenceSource::Keyframe));
                    }
                }
                // Sections can be compared when the world stands at the keyframe's turn.
                if let Some(d) = report.first_divergence.as_mut()
                    && d.sections_turn.is_none()
                    && rp.current() == Some(turn)
                {
                    d.sections =
                        compare_sections(&restored.section_hashes(), &rp.world.section_hashes());
                    d.sections_turn = Some(turn);
                    simulating = false;
                }
            }
            Record::Start { hash, snapshot } => rp.begin_from(&snapshot, hash)?,
            r @ (Record::Desync { .. } | Record::Dispute { .. }) => desyncs.note(r),
            Record::Trailer {
                final_turn,
                final_hash,
                ..
            } if simulating => {
                if let Some(actual) = lookup(&computed, final_turn) {
                    report.hashes_checked += 1;
                    if actual != final_hash && report.first_divergence.is_none() {
                        report.first_divergence = Some(divergence(
                            final_turn,
                            final_hash,
                            actual,
                            DivergenceSource::Trailer,
                        ));
                    }
                }
            }
            _ => {}
        }
    }

    report.rejected_inputs = rp.rejected;
    report.invalid_player_inputs = rp.invalid_players;
    report.turns = rp.simulated;
    report.last_turn = rp.current();
    report.final_hash = report.last_turn.and_then(|t| lookup(&computed, t));
    if let Some(d) = report.first_divergence.as_mut()
        && d.sections.is_empty()
        && let Some(names) = desyncs.0.get(&d.turn).map(|x| &x.sections)
    {
        d.sections = names
            .iter()
            .map(|name| SectionDiff {
                name: name.clone(),
                expected: None,
                actual: None,
            })
            .collect();
        d.sections_turn = Some(d.turn);
    }
    report.recorded_desyncs = desyncs.into_list();
    report.summary = reader.summary().clone();
    Ok(report)
}

const fn divergence(
    turn: Turn,
    expected: StateHash,
    actual: StateHash,
    source: DivergenceSource,
) -> Divergence {
    Divergence {
        turn,
        expected,
        actual,
        source,
        sections: Vec::new(),
        sections_turn: None,
    }
}

fn lookup(computed: &VecDeque<(Turn, StateHash)>, turn: Turn) -> Option<StateHash> {
    // Turns are pushed in increasing order.
    let i = computed.partition_point(|(t, _)| *t < turn);
    computed.get(i).filter(|(t, _)| *t == turn).map(|(_, h)| *h)
}
