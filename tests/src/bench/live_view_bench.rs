//! The live view's part of `bench --only viewer`: a running 4-player match
//! of about 1,000 units, watched in headless Chromium through `relay serve
//! --http` as a late spectator, and the page's frame work and interval.
//!
//! The shipped peers start every match from the standard map, whose bot
//! matches never hold more than a few hundred units; so the benchmark brings
//! its own game, the reference RTS started from `sim::scenarios::armies`:
//! a `Simulation` wrapper, as any game on the contract would be, with the
//! reference game's id so the page draws it.

use super::scenario_game::{Scenario, ScenarioBot, Start};
use super::viewer_bench::{LiveFigures, UNITS, frame_figures};
use crate::browser::Browser;
use crate::harness::{Bins, Relay};
use lockstep::peer::PeerBuilder;
use lockstep::peer::udp::{PlayOptions, UdpPeer, play};
use sim::game::World;
use sim::{MatchSetup, Simulation};
use std::net::UdpSocket;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Players of the live match.
const PLAYERS: u8 = 4;
/// Turns the live match may last (it is stopped once measured).
const TURNS: u32 = 1_800;

/// The reference RTS started from `armies(players, UNITS, seed)`, with the
/// reference game's id so the page draws it.
struct ArmiesStart;

impl Start for ArmiesStart {
    const GAME_ID: &'static str = World::GAME_ID;
    fn world(setup: &MatchSetup) -> World {
        sim::scenarios::armies(setup.players, UNITS, setup.seed)
    }
}

type Armies = Scenario<ArmiesStart>;

/// Starts the release relay with `--http`, plays the match with in-process
/// peers, opens its live view in `browser` once a snapshot is agreed and
/// measures `play_ms` of frames.
///
/// # Errors
/// A process cannot start, the page shows no units in time, or a peer fails.
pub fn measure(
    browser: &Browser,
    bins: &Bins,
    wasm: &Path,
    dir: &Path,
    play_ms: u64,
) -> Result<LiveFigures, String> {
    let wasm = wasm.display().to_string();
    let mut relay = Relay::try_start(
        &bins.relay,
        &dir.join("live-replays"),
        &[
            "--http",
            "127.0.0.1:0",
            "--viewer-wasm",
            &wasm,
            "--snapshot-every",
            "20",
            "--spectator-delay-ms",
            "300",
        ],
    )?;
    let http = relay.try_metrics_addr()?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let peers: Vec<_> = (0..PLAYERS)
            .map(|i| {
                let (relay_addr, stop) = (relay.addr, &stop);
                s.spawn(move || -> Result<(), String> {
                    let seed = u64::from(i) + 1;
                    let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
                    let builder = PeerBuilder::<Armies>::new("armies", PLAYERS)
                        .with_name(&format!("bot{seed}"))
                        .with_turns(TURNS)
                        .with_seed(seed);
                    let mut udp =
                        UdpPeer::new(socket, relay_addr, builder).map_err(|e| e.to_string())?;
                    let opts = PlayOptions {
                        timeout: lockstep::Duration::from_secs(600),
                        ..PlayOptions::default()
                    };
                    play(
                        &mut udp,
                        |p| ScenarioBot::<ArmiesStart>::new(p, seed, 300),
                        &opts,
                        stop,
                        |_, _| {},
                    )
                    .map(drop)
                    .map_err(|e| format!("peer {seed}: {e}"))
                })
            })
            .collect();
        let watched = watch(browser, http, play_ms);
        stop.store(true, Ordering::Relaxed);
        for p in peers {
            p.join().map_err(|_| "a peer panicked".to_owned())??;
        }
        watched
    })
}

/// Opens the match's live view once a snapshot is agreed and measures it.
fn watch(
    browser: &Browser,
    http: std::net::SocketAddr,
    play_ms: u64,
) -> Result<LiveFigures, String> {
    let base = format!("http://{http}");
    browser.goto(&format!("{base}/"))?;
    // Listed, past the first agreed snapshot (turn 20) and the spectator delay.
    let href = browser.wait_for(
        "the match listed past turn 30",
        Duration::from_secs(120),
        "(() => { const r = document.querySelector('#matches tr:nth-child(2)'); \
         return r && +r.cells[3].textContent > 30 && r.querySelector('a').getAttribute('href'); })()",
    )?;
    let href = href.as_str().ok_or("no link to the live view")?;
    browser.goto(&format!("{base}/{href}"))?;
    browser.wait_for(
        "the live view's first units",
        Duration::from_secs(60),
        "viewer.state() && viewer.units() > 0",
    )?;
    let stats = browser.eval_async(&format!(
        "new Promise(r => {{ const t0 = viewer.state().turn; viewer.resetFrameStats(); const f0 = viewer.frameStats().frames; \
         let units = 0; const peak = setInterval(() => {{ units = Math.max(units, viewer.units()); }}, 100); \
         setTimeout(() => {{ clearInterval(peak); const s = viewer.frameStats(); s.units = Math.max(units, viewer.units()); \
         s.measured = s.frames - f0; s.turns = viewer.state().turn - t0; r(s); }}, {play_ms}); }})"
    ))?;
    let turns = stats["turns"].as_u64().unwrap_or(0);
    if turns == 0 {
        return Err(format!(
            "the live view received no turn while measured: {stats}"
        ));
    }
    Ok(LiveFigures {
        units_drawn: stats["units"].as_u64().unwrap_or(0),
        frame: frame_figures(&stats),
        frames: stats["measured"].as_u64().unwrap_or(0),
        turns,
    })
}
