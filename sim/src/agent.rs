//! Players that are not humans (bots, test scripts) for any game, and the
//! stamped inputs they produce for a local match.

use crate::contract::{PlayerId, Simulation, Stamped, Turn};

/// Something that plays a game of `S` in one slot: after every turn it looks
/// at the world and returns the commands to submit (often none). Both
/// shipped bots implement it; `lockstep::peer::Autopilot` puts one on a peer.
pub trait Agent<S: Simulation> {
    /// The slot it plays.
    fn player(&self) -> PlayerId;
    /// The commands to submit after `turn` was simulated into `world`.
    fn think(&mut self, world: &S, turn: Turn) -> Vec<S::Command>;
}

/// The inputs `agents` produce for `turn` from `world`, stamped as the relay
/// would stamp them (each agent's slot; sequence in the order it issued
/// them), agent by agent: for local bot matches, tests and benchmarks
/// without a network.
pub fn agent_inputs<S: Simulation, A: Agent<S>>(
    world: &S,
    agents: &mut [A],
    turn: Turn,
) -> Vec<Stamped<S::Command>> {
    let mut out = Vec::new();
    for agent in agents {
        let player = agent.player();
        for (seq, command) in agent.think(world, turn).into_iter().enumerate() {
            out.push(Stamped {
                player,
                seq: u16::try_from(seq).unwrap_or(u16::MAX),
                command,
            });
        }
    }
    out
}
