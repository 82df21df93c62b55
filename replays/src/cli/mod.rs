//! The `replay` command-line tool as a library: any game ships its own
//! replay tool in a main of a few lines.
//!
//! The tool (info, verify, diff, state, export, reindex) is generic over the
//! games it knows. Register each game's [`Simulation`](sim::Simulation) type with
//! [`Games::with`], then hand the registry to [`main`]; every file is played
//! by the game its header names (id and version), and a file of another game
//! is refused with `this replay is game X version V; this tool knows: ...`
//! (exit 1). The shipped `replay` binary is exactly this, with both shipped
//! games.
//!
//! A game needs one more small trait beyond [`Simulation`](sim::Simulation),
//! [`ReplayGame`], whose defaults are enough to start with: `replay state`
//! shows the state hash and section hashes, and `export`/`diff` show the
//! commands with `serde` and `Debug`. Override its methods for a readable
//! summary. A binary whose game lives in a library crate cannot write
//! `impl ReplayGame for MyGame {}` (the orphan rule, E0117): it registers the
//! game with [`Games::with_simulation`] instead, which needs no impl and
//! shows it with the same defaults (`Games::new().with_simulation::<MyGame>()`).
//!
//! ```no_run
//! // src/bin/my_replay.rs of a game crate: the whole replay tool.
//! use replays::cli::{Games, ReplayGame};
//! use std::process::ExitCode;
//! # use sim::{MatchSetup, SectionHash, Simulation, SnapshotError, Stamped, StateHash, Turn};
//! # /// A game (here a wrapper of the reference game, to keep the example short).
//! # struct MyGame(sim::game::World);
//! # impl Simulation for MyGame {
//! #     type Command = sim::game::Command;
//! #     const GAME_ID: &'static str = "my-game";
//! #     const GAME_VERSION: u32 = 1;
//! #     fn new(setup: &MatchSetup) -> Self { Self(sim::game::World::new(setup)) }
//! #     fn rules_hash(&self) -> StateHash { self.0.rules_hash() }
//! #     fn step(&mut self, turn: Turn, inputs: &[Stamped<Self::Command>]) { self.0.step(turn, inputs) }
//! #     fn state_hash(&self) -> StateHash { self.0.state_hash() }
//! #     fn section_hashes(&self) -> Vec<SectionHash> { self.0.section_hashes() }
//! #     fn snapshot(&self) -> Vec<u8> { self.0.snapshot() }
//! #     fn restore(bytes: &[u8]) -> Result<Self, SnapshotError> { sim::game::World::restore(bytes).map(Self) }
//! # }
//!
//! // Once, next to the game: the defaults show the state hash and section
//! // hashes in `replay state`, and commands with serde and Debug.
//! impl ReplayGame for MyGame {}
//!
//! fn main() -> ExitCode {
//!     replays::cli::main(&Games::new().with::<MyGame>())
//! }
//! ```
//!
//! Exit codes: 0 success (`verify`: every recorded hash matches and no desync
//! is recorded; `diff`: no difference), 1 divergence, damaged or
//! incomplete file (`info` and `verify` alike), difference, unknown game or
//! any other failure, 2 bad usage (`reindex -o` onto its input), 3 (`verify`)
//! the recorded (majority) hashes verify but the recording holds desyncs.
//! Results go to stdout, errors and progress to stderr.

mod args;
mod commands;
mod console;
mod desync;
mod export;
mod games;
mod verify;
mod view;

pub use games::{Games, ReplayGame};

use clap::Parser;
use console::Console;
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

/// Runs the replay tool on the process's arguments, stdout and stderr, with
/// the games in `games`: call it from a binary's `main`. A progress bar
/// appears on stderr during `verify` when stderr is a terminal; a closed
/// stdout (`| head`) is quiet and keeps the exit status.
#[must_use]
pub fn main(games: &Games) -> ExitCode {
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap's own printing keeps its colours on a terminal; `--help`
            // and `--version` exit 0, bad usage 2.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut err = std::io::stderr();
    let progress = err.is_terminal();
    let mut c = Console::new(&mut out, &mut err);
    let code = commands::dispatch(games, cli.command, &mut c, progress);
    ExitCode::from(c.finish(code))
}

/// Runs the replay tool on `args` (the first is the program name, as in
/// `std::env::args_os`), writing results to `out` and diagnostics to `err`
/// (no progress bar). Returns the exit status. Use it to test a game's
/// replay tool in-process; a binary calls [`main`].
pub fn run<I, T>(games: &Games, args: I, out: &mut dyn Write, err: &mut dyn Write) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut c = Console::new(out, err);
    let code = match args::Cli::try_parse_from(args) {
        Ok(cli) => commands::dispatch(games, cli.command, &mut c, false),
        Err(e) => {
            // `--help` and `--version` are results (exit 0); the rest is bad usage (2).
            let text = e.render().to_string();
            if e.use_stderr() {
                c.err(format_args!("{text}"));
            } else {
                c.out(format_args!("{text}"));
            }
            u8::try_from(e.exit_code()).unwrap_or(2)
        }
    };
    c.finish(code)
}
