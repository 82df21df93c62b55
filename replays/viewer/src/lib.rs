//! The replay viewer's simulation side: a recording re-simulated turn by
//! turn with the same code `replay verify` runs natively, compiled to
//! WebAssembly for the page `replay view` serves.
//!
//! [`open`] reads a recording and picks its game; the [`View`] it returns
//! steps, seeks (from the file's keyframes and the snapshots its background
//! [`View::index`] pass leaves), checks every recorded hash, and turns the
//! world into shapes to draw ([`scene`]). The module `wasm` (built for
//! `wasm32` only) exports it to JavaScript as a handful of functions.
//!
//! Build the module the page loads:
//!
//! ```text
//! rustup target add wasm32-unknown-unknown
//! cargo build --release -p lockstep-viewer --target wasm32-unknown-unknown
//! ```

pub mod playback;
pub mod recording;
pub mod scene;
#[cfg(target_arch = "wasm32")]
mod wasm;

pub use playback::Playback;
pub use recording::Recording;
pub use scene::Scene;

use replays::ReplayError;
use serde_json::Value;
use sim::Simulation;

/// A recording being viewed, whatever its game: what the page calls.
/// Everything it returns for the page is JSON.
pub trait View {
    /// The recording's header, timeline markers, keyframes, forensics
    /// reports, commands per minute and the world's section names.
    fn info(&self) -> Value;
    /// Shows the world after `turn` (the last recorded turn before it if
    /// `turn` has no record), from the nearest snapshot at or before it.
    ///
    /// # Errors
    /// A snapshot that does not restore to its recorded hash, a rules mismatch.
    fn seek(&mut self, turn: u32) -> Result<(), ReplayError>;
    /// Takes the next bytes of the recording (a live view receives it as it
    /// grows) and reads the records they complete.
    ///
    /// # Errors
    /// The bytes do not continue this recording.
    fn append(&mut self, more: &[u8]) -> Result<(), ReplayError>;
    /// Steps the shown world over the next turn record; `false` at the end.
    ///
    /// # Errors
    /// As [`View::seek`].
    fn advance(&mut self) -> Result<bool, ReplayError>;
    /// The shown turn, its computed hash, the recorded one and whether they match.
    fn state(&self) -> Value;
    /// Appends the shown world's shapes (see [`scene`]).
    fn draw(&self, out: &mut Vec<i32>);
    /// Runs the background pass over at most `turns` more turn records;
    /// `true` once it has covered the recording (or stopped at an error).
    fn index(&mut self, turns: u32) -> bool;
    /// How far the background pass is, and what its hash checks found.
    fn index_state(&self) -> Value;
    /// The turn hashes the background pass computed, from the `from`th on
    /// (0: all of them): `[{turn, hash}]`. A live view asks for the new ones
    /// only, to report them to the relay.
    fn index_hashes(&self, from: usize) -> Value;
    /// The per-player figures the background pass sampled.
    fn figures(&self) -> Value;
    /// The shown world's entities of one section with their fields (at most
    /// `limit`), from the game's forensics interface.
    fn entities(&self, section: &str, limit: usize) -> Value;
    /// [`replays::verify()`] over the whole file, with every turn's hash:
    /// the same list `replay verify --json --print-hashes` prints natively.
    fn verify(&self) -> Value;
}

/// Why a recording could not be opened for viewing.
#[derive(Debug)]
pub enum OpenError {
    /// Not a readable recording.
    Replay(ReplayError),
    /// A game this viewer was not built with.
    UnknownGame(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Replay(e) => write!(f, "{e}"),
            Self::UnknownGame(g) => write!(
                f,
                "a recording of game \"{g}\": this viewer knows \"{}\" and \"{}\"",
                sim::game::World::GAME_ID,
                sim::arena::Arena::GAME_ID
            ),
        }
    }
}

impl std::error::Error for OpenError {}

impl From<ReplayError> for OpenError {
    fn from(e: ReplayError) -> Self {
        Self::Replay(e)
    }
}

/// Opens a recording of either shipped game for viewing.
///
/// # Errors
/// The bytes are not a recording, or it is of a game this viewer does not know.
pub fn open(bytes: Vec<u8>) -> Result<Box<dyn View>, OpenError> {
    let rec = Recording::parse(&bytes)?;
    let game = rec.header.game_id.clone();
    if game == sim::game::World::GAME_ID {
        Ok(Box::new(Playback::<sim::game::World>::new(bytes, rec)?))
    } else if game == sim::arena::Arena::GAME_ID {
        Ok(Box::new(Playback::<sim::arena::Arena>::new(bytes, rec)?))
    } else {
        Err(OpenError::UnknownGame(game))
    }
}
