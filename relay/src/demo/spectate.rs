//! `relay demo --spectators N`: each spectator joins a third of the way
//! into the match through the relay's snapshot path and watches to the end.

use super::{DemoConfig, DemoGame};
use lockstep::Duration;
use lockstep::peer::udp::{PlayOptions, UdpPeer, play};
use lockstep::peer::{PeerBuilder, PeerSummary};
use sim::{Agent, PlayerId, Simulation};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::AtomicBool;

/// One demo spectator: joins a third of the way into the match (retrying
/// while the match has not started yet) and watches it to the end.
pub(super) fn watch(
    config: &DemoConfig,
    relay: SocketAddr,
    k: u16,
    timeout: Duration,
    stop: &AtomicBool,
) -> std::io::Result<PeerSummary> {
    let third = config
        .relay
        .turn_length
        .saturating_mul(u64::from(config.turns) / 3);
    std::thread::sleep(std::time::Duration::from_micros(third.as_micros()));
    match config.game {
        DemoGame::Rts => {
            spectate::<sim::game::World, _>(config, relay, k, timeout, stop, sim::bot::Bot::new)
        }
        DemoGame::Arena => {
            spectate::<sim::arena::Arena, _>(config, relay, k, timeout, stop, sim::arena::Bot::new)
        }
    }
}

fn spectate<S: Simulation, A: Agent<S>>(
    config: &DemoConfig,
    relay: SocketAddr,
    k: u16,
    timeout: Duration,
    stop: &AtomicBool,
    bot: fn(PlayerId, u64, u32) -> A,
) -> std::io::Result<PeerSummary> {
    let builder = PeerBuilder::<S>::new("demo", config.peers)
        .with_name(&format!("spectator{k}"))
        .with_seed(
            config
                .seed
                .wrapping_mul(1000)
                .wrapping_add(500 + u64::from(k)),
        )
        .with_ticks_per_turn(config.relay.ticks_per_turn)
        .with_spectate();
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    let mut udp = UdpPeer::new(socket, relay, builder)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let opts = PlayOptions {
        timeout,
        ..PlayOptions::default()
    };
    // The agent never thinks: a spectator submits nothing.
    play(&mut udp, |p| bot(p, 0, 0), &opts, stop, |_, _| {})
}
