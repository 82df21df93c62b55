//! Regenerates the golden replays in `replays/tests/data/` with the current
//! games (the reference RTS and the arena) and their bots. Run it when the sim's hashes change on purpose:
//!
//! ```sh
//! cargo run -p lockstep-replays --example make_fixtures
//! INSTA_UPDATE=always cargo test -p lockstep-replays   # then review the snapshot diffs
//! ```

use replays::botmatch::record_bot_match;
use replays::fixtures;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    std::fs::create_dir_all(&dir)?;
    for (name, world, opts) in fixtures::all() {
        let (bytes, hash) = record_bot_match(Vec::new(), world, &opts)?;
        let path = dir.join(name);
        std::fs::write(&path, &bytes)?;
        println!(
            "{}: {} bytes, final hash {}",
            path.display(),
            bytes.len(),
            hash.short()
        );
    }
    // The second game, recorded with `replays::Writer` like any game would.
    let bytes = fixtures::record_arena()?;
    let path = dir.join(fixtures::ARENA);
    std::fs::write(&path, &bytes)?;
    println!("{}: {} bytes", path.display(), bytes.len());
    Ok(())
}
