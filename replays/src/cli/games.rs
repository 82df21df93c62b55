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
        default_summary_text(self)
    }

    /// The `summary` object of `replay state --json`. Default: `{state_hash,
    /// sections: [{name, hash}]}`.
    fn summary_json(&self) -> Value {
        default_summary_json(self)
    }

    /// One player's input bytes of one turn as JSON (`replay export`,
    /// `diff --json`). Default: the list of commands decoded as every peer
    /// decodes them ([`sim::decode_commands`]), each through `serde`, or
    /// `{"rejected": reason}` for bytes no peer would accept.
    fn commands_json(player: PlayerId, bytes: &[u8]) -> Value {
        default_commands_json::<Self>(player, bytes)
    }

    /// One player's input bytes of one turn as text (`replay diff`).
    /// Default: the decoded commands with `Debug`, or the rejection.
    fn commands_text(player: PlayerId, bytes: &[u8]) -> String {
        default_commands_text::<Self>(player, bytes)
    }
}

// The defaults as free functions: `ReplayGame`'s default methods and
// `Games::with_simulation` (a game with no `ReplayGame` impl) share them.

fn default_summary_text<S: Simulation>(world: &S) -> String {
    let mut s = format!("state hash {}\n", world.state_hash());
    for section in world.section_hashes() {
        let _ = writeln!(s, "  {}: {}", section.name, section.hash);
    }
    s
}

fn default_summary_json<S: Simulation>(world: &S) -> Value {
    json!({
        "state_hash": world.state_hash().to_hex(),
        "sections": world.section_hashes().iter()
            .map(|s| json!({"name": s.name, "hash": s.hash.to_hex()}))
            .collect::<Vec<_>>(),
    })
}

fn default_commands_json<S: Simulation>(player: PlayerId, bytes: &[u8]) -> Value {
    match sim::decode_commands::<S::Command>(player, bytes) {
        Ok(cmds) => Value::Array(
            cmds.iter()
                .map(|c| serde_json::to_value(&c.command).unwrap_or(Value::Null))
                .collect(),
        ),
        Err(e) => json!({ "rejected": e.to_string() }),
    }
}

fn default_commands_text<S: Simulation>(player: PlayerId, bytes: &[u8]) -> String {
    match sim::decode_commands::<S::Command>(player, bytes) {
        Ok(cmds) => format!(
            "{:?}",
            cmds.into_iter().map(|c| c.command).collect::<Vec<_>>()
        ),
        Err(e) => format!("(rejected: {e}; {} bytes)", bytes.len()),
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

/// How a registered game is shown: by its [`ReplayGame`] impl ([`ByImpl`])
/// or by the defaults ([`ByDefault`], for [`Games::with_simulation`]).
trait Show<S: Simulation> {
    fn text(world: &S) -> String;
    fn json(world: &S) -> Value;
    fn cmds_json(player: PlayerId, bytes: &[u8]) -> Value;
    fn cmds_text(player: PlayerId, bytes: &[u8]) -> String;
}

/// Shown by the game's [`ReplayGame`] impl.
struct ByImpl;

impl<S: ReplayGame> Show<S> for ByImpl {
    fn text(world: &S) -> String {
        world.summary_text()
    }
    fn json(world: &S) -> Value {
        world.summary_json()
    }
    fn cmds_json(player: PlayerId, bytes: &[u8]) -> Value {
        S::commands_json(player, bytes)
    }
    fn cmds_text(player: PlayerId, bytes: &[u8]) -> String {
        S::commands_text(player, bytes)
    }
}

/// Shown by the defaults: no `ReplayGame` impl needed, so a binary can
/// register a game of another crate (where `impl ReplayGame for TheirGame {}`
/// breaks the orphan rule, E0117).
struct ByDefault;

impl<S: Simulation> Show<S> for ByDefault {
    fn text(world: &S) -> String {
        default_summary_text(world)
    }
    fn json(world: &S) -> Value {
        default_summary_json(world)
    }
    fn cmds_json(player: PlayerId, bytes: &[u8]) -> Value {
        default_commands_json::<S>(player, bytes)
    }
    fn cmds_text(player: PlayerId, bytes: &[u8]) -> String {
        default_commands_text::<S>(player, bytes)
    }
}

/// `Registered` for the game `S` shown by `M` (`fn` pointer types: always
/// `Send + Sync`).
struct Entry<S, M>(PhantomData<fn() -> (S, M)>);

impl<S: Simulation, M: Show<S>> Registered for Entry<S, M> {
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
            text: M::text(&s.world),
            json: M::json(&s.world),
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
        M::cmds_json(player, bytes)
    }

    fn commands_text(&self, player: PlayerId, bytes: &[u8]) -> String {
        M::cmds_text(player, bytes)
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
    pub fn with<S: ReplayGame + 'static>(self) -> Self {
        self.register::<S, ByImpl>()
    }

    /// Adds the game `S` as [`with`](Self::with) does, shown by
    /// [`ReplayGame`]'s defaults (state and section hashes; commands with
    /// `serde` and `Debug`), with no `ReplayGame` impl. Use it in a binary
    /// whose game lives in a library crate: there `impl ReplayGame for
    /// MyGame {}` is refused by the orphan rule (E0117), this is not.
    #[must_use]
    pub fn with_simulation<S: Simulation + 'static>(self) -> Self {
        self.register::<S, ByDefault>()
    }

    fn register<S: Simulation + 'static, M: Show<S> + 'static>(mut self) -> Self {
        self.list
            .retain(|g| (g.id(), g.version()) != (S::GAME_ID, S::GAME_VERSION));
        self.list.push(Box::new(Entry::<S, M>(PhantomData)));
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
