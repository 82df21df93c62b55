//! `replay`: inspect, verify, diff, seek into and export replay files of
//! the shipped games, the reference RTS (`sim::game::World`) and the arena
//! (`sim::arena::Arena`); each file is played by the game its header names.
//!
//! The whole tool is [`replays::cli`]; a game ships its own replay tool
//! with a main like this one. Exit codes: 0 success (verified with no
//! desync recorded / identical), 1 divergence, damaged file, unknown game or
//! any other failure, 2 bad usage, 3 (`verify`) the recorded (majority)
//! hashes verify but the recording holds desyncs.

use replays::cli::Games;
use std::process::ExitCode;

fn main() -> ExitCode {
    replays::cli::main(
        &Games::new()
            .with::<sim::game::World>()
            .with::<sim::arena::Arena>(),
    )
}
