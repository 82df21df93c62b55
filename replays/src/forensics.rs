//! The desync forensics report: what the relay found about one desync, down
//! to entities and fields. The relay writes it as JSON next to its replay
//! and as a record in the replay ([`Record::Forensics`](crate::Record::Forensics));
//! `replay desync FILE` prints it.

use serde::{Deserialize, Serialize};

/// Turns of inputs before (and including) the desynced turn a report carries
/// unless the relay is told otherwise.
pub const REPORT_INPUT_TURNS: u32 = 20;

/// The forensics report of one desync.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesyncReport {
    /// The desynced turn (the first whose hashes disagreed).
    pub turn: u32,
    /// True when no strict majority exists (e.g. two players): the relay
    /// cannot tell who is odd. `majority_players` is then the side of the
    /// lowest player id, `odd_players` everyone else, and the `majority` /
    /// `odd` values below are those sides' values, not a verdict.
    pub no_majority: bool,
    /// Players holding the majority hash.
    pub majority_players: Vec<u8>,
    /// Players outside it.
    pub odd_players: Vec<u8>,
    /// Every reporter's hash for the turn.
    pub hashes: Vec<PlayerHash>,
    /// The pairs the relay compared: one odd and one majority peer per odd group.
    pub compared: Vec<Comparison>,
    /// Every entity found to differ, with its field-by-field diff.
    pub entities: Vec<EntityReport>,
    /// True when every comparison ran to the end (dumps of every differing
    /// entity found, within the caps); false when a peer did not answer in
    /// time, no longer kept the turn, or gave an answer that did not check.
    pub complete: bool,
    /// What stopped or limited the narrowing, for humans.
    pub notes: Vec<String>,
    /// The inputs of the last turns up to the desynced one (filled by the recorder).
    pub inputs: Vec<TurnInputs>,
}

/// A player's hash.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlayerHash {
    /// The player.
    pub player: u8,
    /// Its hash (hex).
    pub hash: String,
}

/// One compared pair and their section hashes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comparison {
    /// The odd peer asked.
    pub odd: u8,
    /// The majority peer asked.
    pub majority: u8,
    /// Both sides' section hashes (only sections that differ are narrowed).
    pub sections: Vec<SectionPair>,
}

/// A section's hash on both sides.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionPair {
    /// Section name.
    pub name: String,
    /// Majority side's hash (hex), `None` if the section is missing there.
    pub majority: Option<String>,
    /// Odd side's hash (hex).
    pub odd: Option<String>,
    /// Whether they differ.
    pub differs: bool,
}

/// An entity that differs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityReport {
    /// The section holding it.
    pub section: String,
    /// Its id in the section.
    pub id: u64,
    /// The odd peer compared.
    pub odd_player: u8,
    /// The majority peer compared.
    pub majority_player: u8,
    /// The entity's hash on the majority side (hex; `None`: it does not exist there).
    pub majority_hash: Option<String>,
    /// On the odd side.
    pub odd_hash: Option<String>,
    /// The differing fields (empty when the dumps were not obtained or show
    /// no difference; see the report's notes).
    pub fields: Vec<FieldReport>,
}

/// One differing field.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldReport {
    /// Field path, e.g. `hp` or `pos.x`.
    pub path: String,
    /// The majority side's value (`None`: the field or entity is missing there).
    pub majority: Option<String>,
    /// The odd side's value.
    pub odd: Option<String>,
}

/// One turn's inputs as the relay bundled them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnInputs {
    /// The turn.
    pub turn: u32,
    /// Per entry: the player and the opaque input bytes (hex).
    pub inputs: Vec<PlayerInput>,
}

/// One player's input entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlayerInput {
    /// The player.
    pub player: u8,
    /// The bytes (`sim::encode_commands`), hex.
    pub bytes: String,
}

/// Lowercase hex of `bytes`.
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

impl DesyncReport {
    /// The report as a human-readable text: the verdict, then a table per
    /// entity (field, majority value, odd value), then the notes.
    #[must_use]
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let list = |v: &[u8]| {
            v.iter()
                .map(|p| format!("P{p}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(s, "DESYNC at turn {}", self.turn);
        if self.no_majority {
            let _ = writeln!(
                s,
                "no majority: the relay cannot tell who is odd; 'majority' is {}'s side, 'odd' is {}'s",
                list(&self.majority_players),
                list(&self.odd_players)
            );
        } else {
            let _ = writeln!(
                s,
                "odd players: {}; majority: {}",
                list(&self.odd_players),
                list(&self.majority_players)
            );
        }
        for c in &self.compared {
            let differing: Vec<&str> = c
                .sections
                .iter()
                .filter(|x| x.differs)
                .map(|x| x.name.as_str())
                .collect();
            let _ = writeln!(
                s,
                "compared P{} (odd) with P{} (majority): sections differing: {}",
                c.odd,
                c.majority,
                differing.join(", ")
            );
        }
        if self.entities.is_empty() {
            let _ = writeln!(s, "no differing entity found");
        }
        for e in &self.entities {
            let _ = writeln!(
                s,
                "\nentity {} in {} (P{} odd vs P{} majority)",
                e.id, e.section, e.odd_player, e.majority_player
            );
            let w = e
                .fields
                .iter()
                .map(|f| f.path.len())
                .chain([5])
                .max()
                .unwrap_or(5);
            let wm = e
                .fields
                .iter()
                .map(|f| f.majority.as_deref().unwrap_or("-").len())
                .chain([8])
                .max()
                .unwrap_or(8);
            let _ = writeln!(s, "  {:w$}  {:wm$}  odd", "field", "majority");
            for f in &e.fields {
                let _ = writeln!(
                    s,
                    "  {:w$}  {:wm$}  {}",
                    f.path,
                    f.majority.as_deref().unwrap_or("-"),
                    f.odd.as_deref().unwrap_or("-")
                );
            }
            if e.fields.is_empty() {
                let _ = writeln!(s, "  (no field diff)");
            }
        }
        let _ = writeln!(
            s,
            "\n{}",
            if self.complete {
                "narrowing complete"
            } else {
                "narrowing incomplete"
            }
        );
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        if let Some(first) = self.inputs.first() {
            let n: usize = self.inputs.iter().map(|t| t.inputs.len()).sum();
            let _ = writeln!(
                s,
                "inputs: turns {}..={} ({} entries; `replay desync --json` lists them)",
                first.turn, self.turn, n
            );
        }
        s
    }
}
