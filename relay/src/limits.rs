//! Bounds on what one connection or match can make the relay hold, so that a
//! hostile or broken peer costs a fixed amount of memory.

/// Memory bounds of a router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most connections tracked at once; more are refused.
    pub max_connections: usize,
    /// Most matches (lobbies and running) at once.
    pub max_matches: usize,
    /// How far ahead of the next turn to close an input may be (turns);
    /// inputs further ahead are dropped and counted.
    pub max_turns_ahead: u32,
    /// Most turns whose hash reports are kept while waiting for every player.
    pub max_hash_turns: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            max_matches: 1024,
            max_turns_ahead: 128,
            max_hash_turns: 256,
        }
    }
}
