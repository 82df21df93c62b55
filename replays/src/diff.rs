//! Comparison of two recordings of the same match (say the relay's and a
//! peer's): [`diff()`] finds the first turn whose inputs or hashes differ.

use crate::Record;
use crate::error::ReplayError;
use crate::format::Header;
use crate::reader::{ReadSummary, Reader};
use sim::{PlayerId, StateHash, Turn};
use std::collections::BTreeMap;
use std::io::Read;

/// One player's input at the differing turn in each file (`None`: absent or empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputDiff {
    /// The player.
    pub player: PlayerId,
    /// Bytes in file A.
    pub a: Option<Vec<u8>>,
    /// Bytes in file B.
    pub b: Option<Vec<u8>>,
}

/// The first turn at which two replays disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// The turn.
    pub turn: Turn,
    /// Players whose inputs differ (empty when only the hashes differ).
    pub inputs: Vec<InputDiff>,
    /// Hash recorded for the turn in A (hash record or keyframe).
    pub hash_a: Option<StateHash>,
    /// Hash recorded for the turn in B.
    pub hash_b: Option<StateHash>,
}

impl Difference {
    /// True when both files record a hash for the turn and they differ.
    #[must_use]
    pub fn hashes_differ(&self) -> bool {
        matches!((self.hash_a, self.hash_b), (Some(a), Some(b)) if a != b)
    }
}

/// What [`diff()`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffReport {
    /// Header fields that make the two files different matches.
    pub header_differences: Vec<String>,
    /// The first differing turn within the turns both files hold.
    pub first: Option<Difference>,
    /// Turns compared (present in both files) up to the first difference.
    pub common_turns: u32,
    /// How file A reads.
    pub a: ReadSummary,
    /// How file B reads.
    pub b: ReadSummary,
}

impl DiffReport {
    /// True when nothing differs in the turns both files hold and the headers agree.
    #[must_use]
    pub fn same(&self) -> bool {
        self.first.is_none() && self.header_differences.is_empty()
    }
}

#[derive(Default)]
struct TurnInfo {
    inputs: Option<Vec<(PlayerId, Vec<u8>)>>,
    hash: Option<StateHash>,
}

/// The inputs of a turn with empty ones removed, sorted by player: the relay
/// may bundle an empty input explicitly or leave it out, which means the same.
fn normalise(mut inputs: Vec<(PlayerId, Vec<u8>)>) -> Vec<(PlayerId, Vec<u8>)> {
    // `[0]` is postcard's empty command list, what `sim::encode_commands(&[])` writes.
    inputs.retain(|(_, b)| !b.is_empty() && b.as_slice() != [0]);
    inputs.sort_by_key(|(p, _)| *p);
    inputs
}

fn load<R: Read>(reader: &mut Reader<R>) -> Result<BTreeMap<Turn, TurnInfo>, ReplayError> {
    let mut map: BTreeMap<Turn, TurnInfo> = BTreeMap::new();
    for item in reader.by_ref() {
        let record = match item {
            Ok(r) => r,
            Err(e) if e.is_damage() => break,
            Err(e) => return Err(e),
        };
        match record {
            Record::Turn { turn, inputs } => {
                map.entry(turn).or_default().inputs = Some(normalise(inputs));
            }
            Record::Hash { turn, hash } | Record::Keyframe { turn, hash, .. } => {
                map.entry(turn).or_default().hash.get_or_insert(hash);
            }
            _ => {}
        }
    }
    Ok(map)
}

fn header_differences(a: &Header, b: &Header) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |name: &str, da: String, db: String| {
        if da != db {
            out.push(format!("{name}: {da} vs {db}"));
        }
    };
    check("game", a.game_id.clone(), b.game_id.clone());
    check(
        "game version",
        a.game_version.to_string(),
        b.game_version.to_string(),
    );
    check("rules hash", a.rules_hash.short(), b.rules_hash.short());
    check("seed", a.setup.seed.to_string(), b.setup.seed.to_string());
    check(
        "players",
        a.setup.players.to_string(),
        b.setup.players.to_string(),
    );
    check(
        "ticks per turn",
        a.setup.ticks_per_turn.to_string(),
        b.setup.ticks_per_turn.to_string(),
    );
    out
}

/// Finds the first turn where two recordings of a match differ in inputs or
/// in recorded hashes. Holds both files' turn records in memory (a few
/// megabytes per hour of play).
pub fn diff<RA: Read, RB: Read>(
    mut a: Reader<RA>,
    mut b: Reader<RB>,
) -> Result<DiffReport, ReplayError> {
    let header_differences = header_differences(a.header(), b.header());
    let ma = load(&mut a)?;
    let mut mb = load(&mut b)?;
    let mut first = None;
    let mut common_turns = 0;
    for (turn, ia) in ma {
        let Some(ib) = mb.remove(&turn) else {
            continue;
        };
        if ia.inputs.is_some() && ib.inputs.is_some() {
            common_turns += 1;
        }
        let inputs = match (&ia.inputs, &ib.inputs) {
            (Some(x), Some(y)) if x != y => input_diffs(x, y),
            _ => Vec::new(),
        };
        let hashes_differ = matches!((ia.hash, ib.hash), (Some(x), Some(y)) if x != y);
        if !inputs.is_empty() || hashes_differ {
            first = Some(Difference {
                turn,
                inputs,
                hash_a: ia.hash,
                hash_b: ib.hash,
            });
            break;
        }
    }
    Ok(DiffReport {
        header_differences,
        first,
        common_turns,
        a: a.summary().clone(),
        b: b.summary().clone(),
    })
}

fn input_diffs(a: &[(PlayerId, Vec<u8>)], b: &[(PlayerId, Vec<u8>)]) -> Vec<InputDiff> {
    let mut players: Vec<PlayerId> = a.iter().chain(b).map(|(p, _)| *p).collect();
    players.sort();
    players.dedup();
    let get =
        |v: &[(PlayerId, Vec<u8>)], p| v.iter().find(|(q, _)| *q == p).map(|(_, x)| x.clone());
    players
        .into_iter()
        .filter_map(|p| {
            let (x, y) = (get(a, p), get(b, p));
            (x != y).then_some(InputDiff {
                player: p,
                a: x,
                b: y,
            })
        })
        .collect()
}
