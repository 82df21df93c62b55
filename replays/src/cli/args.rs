//! The replay tool's command line (clap): subcommands, flags and help texts.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "replay",
    version,
    about = "Inspect, verify, diff and seek into lockstep replay files",
    after_help = "Exit codes: 0 success, 1 divergence / damaged file / difference / error, 2 bad usage, 3 (verify) hashes verify but the recording holds desyncs."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Header, players, turns, duration, final hash, and whether the file is complete.
    Info {
        /// The replay file.
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Re-simulate the match, check every recorded hash (the majority's on a
    /// desynced turn) and list the desyncs the recording holds (exit 3).
    Verify {
        /// The replay file.
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Also print the re-simulated hash after every turn (for comparing
        /// builds, e.g. across CPU architectures).
        #[arg(long)]
        print_hashes: bool,
    },
    /// First turn where two recordings of a match differ in inputs or hashes.
    Diff {
        /// First replay (e.g. the relay's).
        a: PathBuf,
        /// Second replay (e.g. a peer's).
        b: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The game's summary of the world after a turn (e.g. units per player) and its hash.
    State {
        /// The replay file.
        file: PathBuf,
        /// The turn (the state after stepping it).
        #[arg(long)]
        turn: u32,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The relay's desync forensics report: the entities and fields that
    /// differ between the odd and the majority peers, with both values
    /// (exit 1 if the file holds none).
    Desync {
        /// The replay file (a relay recording).
        file: PathBuf,
        /// Print one JSON object (`{"reports": [...]}`) instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// One JSON object per record, one per line.
    Export {
        /// The replay file.
        file: PathBuf,
    },
    /// Write a copy of a replay with a keyframe every K turns, so seeking is fast.
    Reindex {
        /// The replay file.
        file: PathBuf,
        /// Keyframe interval in turns.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
        every: u32,
        /// Output file (must differ from the input).
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Show the match in a web browser: serves a page that re-simulates the
    /// recording (WebAssembly, the same code as `verify`), draws it, plays,
    /// seeks and checks every recorded hash. Runs until Ctrl-C.
    View {
        /// The replay file.
        file: PathBuf,
        /// Address to serve on (port 0: any free port; the URL is printed).
        #[arg(long, default_value = "127.0.0.1:7780")]
        bind: String,
        /// The viewer's WebAssembly module (default: LOCKSTEP_VIEWER_WASM, else
        /// built next to this binary by `cargo build --profile wasm -p
        /// lockstep-viewer --target wasm32-unknown-unknown`).
        #[arg(long)]
        wasm: Option<PathBuf>,
    },
}
