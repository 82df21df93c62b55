//! The games a replay tool knows: [`ReplayGame`] (what the tool needs
//! beyond [`Simulation`]) and the [`Games`] registry that picks the game a
//! file was recorded with.

use crate::error::ReplayError;
use crate::reader::Reader;
use crate::seek::ReindexReport;
use crate::verify::{Progress, VerifyReport};
use serde_json::{Value, json};
use sim::{PlayerId, Simulation, StateHash, Turn};
use std::fmt::{self, Write as _};
use std::fs::File;
use std::io::BufReader;
use std::marker::PhantomData;

/// What the replay tool needs from a game beyond [`Simulation`]: a summary
/// of a world for `replay state`, and how to show a player's commands for
/// `replay export` and `replay diff`. Every method has a default, so
/// `impl ReplayGame for MyGame {}` is enough to ship a replay tool.
pub trait ReplayGame: Simulation {
    /// The text `replay state` prints after the hash, ending with a newline.
    /// Default: the state hash and the section hashes. Override it with the
    /// game's own summary (units, scores).
    fn summary_text(&self) -> String {
        let mut s = format!("state hash {}\n", self.state_hash());
        for section in self.section_hashes() {
            let _ = writeln!(s, "  {}: {}", section.name, section.hash);
        }
        s
    }

    /// The `summary` object of `replay state --json`. Default: `{state_hash,
    /// sections: [{name, hash}]}`.
    fn summary_json(&self) -> Value {
        json!({
            "state_hash": self.state_hash().to_hex(),
            "sections": self.section_hashes().iter()
                .map(|s| json!({"name": s.name, "hash": s.hash.to_hex()}))
                .collect::<Vec<_>>(),
        })
    }

    /// One player's input bytes of one turn as JSON (`replay export`,
    /// `diff --json`). Default: the list of commands decoded as every peer
    /// decodes them ([`sim::decode_commands`]), each through `serde`, or
    /// `{"rejected": reason}` for bytes no peer would accept.
    fn commands_json(player: PlayerId, bytes: &[u8]) -> Value {
        match sim::decode_commands::<Self::Command>(player, bytes) {
            Ok(cmds) => Value::Array(
                cmds.iter()
                    .map(|c| serde_json::to_value(&c.command).unwrap_or(Value::Null))
                    .collect(),
            ),
            Err(e) => json!({ "rejected": e.to_string() }),
        }
    }

    /// One player's input bytes of one turn as text (`replay diff`).
    /// Default: the decoded commands with `Debug`, or the rejection.
    fn commands_text(player: PlayerId, bytes: &[u8]) -> String {
        match sim::decode_commands::<Self::Command>(player, bytes) {
            Ok(cmds) => format!(
                "{:?}",
                cmds.into_iter().map(|c| c.command).collect::<Vec<_>>()
            ),
            Err(e) => format!("(rejected: {e}; {} bytes)", bytes.len()),
        }
    }
}

/// The reference RTS: `replay state` shows units, resources and bases per player.
impl ReplayGame for sim::game::World {
    fn summary_text(&self) -> String {
        self.summary().to_string()
    }

    fn summary_json(&self) -> Value {
        serde_json::to_value(self.summary()).unwrap_or(Value::Null)
    }
}

/// The arena: `replay state` shows scores, deaths and hulls per ship.
impl ReplayGame for sim::arena::Arena {
    fn summary_text(&self) -> String {
        self.summary().to_string()
    }

    fn summary_json(&self) -> Value {
        serde_json::to_value(self.summary()).unwrap_or(Value::Null)
    }
}

/// A replay file being read.
pub(crate) type FileReader = Reader<BufReader<File>>;

/// The world after a turn, as `replay state` shows it.
pub(crate) struct StateView {
    pub(crate) hash: StateHash,
    pub(crate) recorded_hash: Option<StateHash>,
    pub(crate) keyframe: Option<Turn>,
    pub(crate) simulated: u32,
    pub(crate) text: String,
    pub(crate) json: Value,
}

/// One registered game, with its type erased so a registry holds several.
pub(crate) trait Registered {
    fn id(&self) -> &'static str;
    fn version(&self) -> u32;
    fn verify(
        &self,
        reader: FileReader,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<VerifyReport, ReplayError>;
    fn state(&self, reader: FileReader, turn: Turn) -> Result<StateView, ReplayError>;
    fn reindex(
        &self,
        reader: FileReader,
        out: File,
        every: u32,
    ) -> Result<ReindexReport, ReplayError>;
    fn commands_json(&self, player: PlayerId, bytes: &[u8]) -> Value;
    fn commands_text(&self, player: PlayerId, bytes: &[u8]) -> String;
}

/// `Registered` for the game `S` (a `fn` pointer type: always `Send + Sync`).
struct Entry<S>(PhantomData<fn() -> S>);

impl<S: ReplayGame> Registered for Entry<S> {
    fn id(&self) -> &'static str {
        S::GAME_ID
    }

    fn version(&self) -> u32 {
        S::GAME_VERSION
    }

    fn verify(
        &self,
        reader: FileReader,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<VerifyReport, ReplayError> {
        crate::verify::<S, _>(reader, progress)
    }

    fn state(&self, reader: FileReader, turn: Turn) -> Result<StateView, ReplayError> {
        let s = crate::seek::<S, _>(reader, turn)?;
        Ok(StateView {
            hash: s.world.state_hash(),
            recorded_hash: s.recorded_hash,
            keyframe: s.keyframe,
            simulated: s.simulated,
            text: s.world.summary_text(),
            json: s.world.summary_json(),
        })
    }

    fn reindex(
        &self,
        reader: FileReader,
        out: File,
        every: u32,
    ) -> Result<ReindexReport, ReplayError> {
        crate::reindex::<S, _, _>(reader, out, every).map(|(_, report)| report)
    }

    fn commands_json(&self, player: PlayerId, bytes: &[u8]) -> Value {
        S::commands_json(player, bytes)
    }

    fn commands_text(&self, player: PlayerId, bytes: &[u8]) -> String {
        S::commands_text(player, bytes)
    }
}

/// The games a replay tool plays, each file by the game its header names.
/// Build it once in `main`: `Games::new().with::<MyGame>()`.
#[derive(Default)]
pub struct Games {
    list: Vec<Box<dyn Registered>>,
}

impl Games {
    /// A registry with no game yet (`replay info` still reads any file).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the game `S`: files whose header names `S::GAME_ID` and
    /// `S::GAME_VERSION` are played with it. Registering the same id and
    /// version again replaces the earlier entry.
    #[must_use]
    pub fn with<S: ReplayGame + 'static>(mut self) -> Self {
        self.list
            .retain(|g| (g.id(), g.version()) != (S::GAME_ID, S::GAME_VERSION));
        self.list.push(Box::new(Entry::<S>(PhantomData)));
        self
    }

    /// The known games as `id version` pairs, e.g. `lockstep-rts 1, arena 1`
    /// (`none` for an empty registry).
    #[must_use]
    pub fn known(&self) -> String {
        if self.list.is_empty() {
            return "none".to_owned();
        }
        self.list
            .iter()
            .map(|g| format!("{} {}", g.id(), g.version()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The game that plays a file of game `id` version `version`.
    pub(crate) fn find(&self, id: &str, version: u32) -> Result<&dyn Registered, UnknownGame> {
        self.list
            .iter()
            .find(|g| g.id() == id && g.version() == version)
            .map(AsRef::as_ref)
            .ok_or_else(|| UnknownGame {
                id: id.to_owned(),
                version,
                known: self.known(),
            })
    }
}

impl fmt::Debug for Games {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Games({})", self.known())
    }
}

/// A file of a game the tool does not know (exit 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this replay is game {id} version {version}; this tool knows: {known}")]
pub(crate) struct UnknownGame {
    id: String,
    version: u32,
    known: String,
}
