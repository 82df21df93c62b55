//! `peer`: a headless peer of a shipped game (`--game rts`, the reference
//! RTS, or `--game arena`) with its seeded bot, built on the public
//! `lockstep::peer` API only. Joins a match on a relay, plays it, prints
//! progress on stderr and a summary on exit. Exit code 0 when the match
//! completed without desync, 3 on a desync,
//! 4 when the relay ended the match because it is shutting down, 5 when the
//! relay refused the peer (one line on stderr: `refused by the relay:
//! <reason>`), 1 on any other failure, 2 for bad usage.

use clap::{Parser, ValueEnum};
use lockstep::Duration;
use lockstep::netsim::LinkConfig;
use lockstep::peer::BuildError;
use lockstep::peer::udp::{PlayOptions, UdpPeer, play};
use lockstep::peer::{Agent, EndReason, PeerBuilder, PeerSummary, RejoinSecret};
use lockstep::token::ConnectToken;
use sim::{PlayerId, Simulation, Turn};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

// Results on stdout, diagnostics on stderr, and no panic on a closed pipe
// (`| head`): these shadow the std macros for the whole binary.
use replays::{err_println as eprintln, out_println as println};

#[derive(Parser)]
#[command(
    name = "peer",
    version,
    about = "Headless lockstep peer running a shipped game (rts or arena) with a seeded bot"
)]
struct Cli {
    /// The game to play: the reference RTS or the arena shooter.
    #[arg(long, value_enum, default_value_t = Game::Rts)]
    game: Game,
    /// The relay's UDP address, `HOST:PORT` (an IP address or a host name
    /// such as `localhost:7777`; a name is resolved once, IPv4 first).
    #[arg(long, value_parser = resolve_relay)]
    relay: SocketAddr,
    /// Match name; peers giving the same name play together.
    #[arg(long = "match", default_value = "default")]
    match_name: String,
    /// Number of players in the match (1 to 32).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=i64::from(sim::MAX_PLAYERS)))]
    players: u8,
    /// Turns to play: a number (at least 1), or `unbounded` to play until
    /// the relay ends the match.
    #[arg(long, default_value = "300", value_parser = parse_turns)]
    turns: TurnLimit,
    /// Seed of this peer's bot (and transport).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Bot actions per minute (default: 300 for rts, 1800 for arena).
    #[arg(long)]
    apm: Option<u32>,
    /// Display name (default `bot<seed>`); the relay appends `#2`, `#3`, ... to
    /// a name another player of the match already has.
    #[arg(long)]
    name: Option<String>,
    /// Record this peer's view of the match (with keyframes) to this replay
    /// file. It is created before joining (a path that cannot be created
    /// stops the peer with exit 1 at once) and an existing file is refused
    /// unless `--force`.
    #[arg(long, conflicts_with = "spectate")]
    record: Option<PathBuf>,
    /// Let `--record` replace an existing file.
    #[arg(long, requires = "record")]
    force: bool,
    /// Fault switch: perturb the own world after simulating this turn.
    #[arg(long)]
    desync_at: Option<u32>,
    /// Simulation ticks per turn the relay runs (`relay serve
    /// --ticks-per-turn`); the join's rules fingerprint is computed for it.
    #[arg(long, default_value_t = lockstep::peer::DEFAULT_TICKS_PER_TURN,
          value_parser = clap::value_parser!(u16).range(1..))]
    ticks_per_turn: u16,
    /// Local UDP address to bind.
    #[arg(long, default_value = "0.0.0.0:0")]
    bind: SocketAddr,
    /// Give up (exit 1) when the match has not ended this many seconds after
    /// the start of this process: the wait for the relay and for the other
    /// players in the lobby counts, so a lobby that never fills ends here.
    /// Raise it for matches that, lobby included, outlast it (`--turns unbounded`).
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// When the connection to the relay is lost mid-match (the relay
    /// restarted, or the path broke), keep the world and ask for the slot
    /// back on a new connection for this many seconds (0: exit 1 at once).
    #[arg(long, default_value_t = lockstep::peer::RECONNECT_FOR.as_micros() / 1_000_000)]
    reconnect_s: u64,
    /// Simulated loss on this peer's link, each way (0..1).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Simulated one-way latency (ms).
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Simulated jitter (±ms).
    #[arg(long, default_value_t = 0)]
    jitter_ms: u64,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Join token (hex, from `relay token`) for a relay in token mode; the
    /// relay puts this peer in the token's match slot.
    #[arg(long)]
    token: Option<String>,
    /// Rejoin file: if it holds a slot of this match (written by an earlier
    /// run of this peer), come back into that slot instead of joining;
    /// otherwise join and write the slot's rejoin secret there (mode 0600)
    /// as soon as the relay gives it (right after the start), so a
    /// restarted peer can rejoin.
    #[arg(long)]
    rejoin_file: Option<PathBuf>,
    /// Watch the running match `--match` instead of playing: from the
    /// relay's agreed snapshot, a few seconds behind live, checking hashes
    /// (`--players` and `--turns` are not needed).
    #[arg(long, conflicts_with_all = ["rejoin_file", "desync_at"])]
    spectate: bool,
    /// Keep a speculative view (`PeerBuilder::with_speculation`): render
    /// 60 frames a second, each bringing a world forked from the confirmed
    /// one up to the turn the own commands land in; report how soon an own
    /// command showed (`own_feedback_ms`) and the view's frames, fallbacks
    /// and corrections. Hashes and recordings stay the confirmed world's.
    #[arg(long, conflicts_with = "spectate")]
    speculate: bool,
}

/// Resolves `--relay` (clap shows the error, naming the text, exit 2).
fn resolve_relay(text: &str) -> Result<SocketAddr, String> {
    lockstep::peer::udp::resolve(text).map_err(|e| e.to_string())
}

/// `--turns`: how many turns to play, `None` for `unbounded`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TurnLimit(Option<std::num::NonZeroU32>);

/// Parses `--turns`: `0` used to mean "unbounded" silently, so it is
/// refused with a pointer to the explicit word.
fn parse_turns(text: &str) -> Result<TurnLimit, String> {
    if text.eq_ignore_ascii_case("unbounded") {
        return Ok(TurnLimit(None));
    }
    let n: u32 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of turns or `unbounded`"))?;
    std::num::NonZeroU32::new(n)
        .map(|n| TurnLimit(Some(n)))
        .ok_or_else(|| {
            "0 turns: to play until the relay ends the match, pass `--turns unbounded`".to_owned()
        })
}

/// A held slot to come back into: what `--rejoin-file` holds (three lines:
/// match name, slot, secret in hex).
fn read_rejoin(path: &std::path::Path, match_name: &str) -> Option<(PlayerId, RejoinSecret)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    if lines.next()? != match_name {
        return None;
    }
    let slot: u8 = lines.next()?.trim().parse().ok()?;
    let secret = RejoinSecret::from_hex(lines.next()?)?;
    Some((PlayerId(slot), secret))
}

/// Writes the rejoin file (owner-only: the secret takes over the slot).
fn write_rejoin(
    path: &std::path::Path,
    match_name: &str,
    (player, secret): (PlayerId, RejoinSecret),
) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let mut f = o.open(&tmp)?;
    writeln!(f, "{match_name}\n{}\n{}", player.0, secret.to_hex())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The shipped games.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Game {
    /// The reference RTS (`lockstep-rts`).
    Rts,
    /// The arena shooter (`arena`).
    Arena,
}

/// Plays one match of `S` with the bot `bot` builds, over `socket`.
fn run<S: Simulation + 'static, A: Agent<S>>(
    cli: &Cli,
    socket: UdpSocket,
    token: Option<ConnectToken>,
    ticks_per_turn: u16,
    fault: fn(&mut S, Turn),
    bot: fn(PlayerId, u64, Option<u32>) -> A,
) -> Result<PeerSummary, String> {
    let name = cli
        .name
        .clone()
        .unwrap_or_else(|| format!("bot{}", cli.seed));
    let mut builder = PeerBuilder::<S>::new(&cli.match_name, cli.players)
        .with_name(&name)
        // The builder's 0 is its own "until the match ends".
        .with_turns(cli.turns.0.map_or(0, std::num::NonZeroU32::get))
        .with_seed(cli.seed)
        .with_ticks_per_turn(ticks_per_turn)
        .with_reconnect(lockstep::Duration::from_secs(cli.reconnect_s));
    if let Some(t) = token {
        builder = builder.with_token(t);
    }
    let rejoin = cli
        .rejoin_file
        .as_deref()
        .and_then(|p| read_rejoin(p, &cli.match_name));
    if let Some(path) = &cli.record {
        if rejoin.is_some() {
            // A rejoined peer's recording would lack the turns it missed.
            eprintln!(
                "peer: not recording to {}: a rejoining peer records nothing (the relay's recording is the match's record)",
                path.display()
            );
        } else {
            builder = builder.with_record(path).with_record_overwrite(cli.force);
        }
    }
    if let Some(turn) = cli.desync_at {
        builder = builder.with_fault(Turn(turn), fault);
    }
    if let Some((player, secret)) = rejoin {
        eprintln!("peer: rejoining slot {} of {}", player.0, cli.match_name);
        builder = builder.with_rejoin(player, secret);
    }
    if cli.spectate {
        builder = builder.with_spectate();
    }
    if cli.speculate {
        builder = builder.with_speculation(lockstep::peer::SpeculationConfig::default());
    }
    let mut udp = UdpPeer::new(socket, cli.relay, builder).map_err(|e| match e {
        BuildError::Record {
            kind: std::io::ErrorKind::AlreadyExists,
            ..
        } => format!("{e}; pass --force to overwrite it"),
        e => e.to_string(),
    })?;
    let impaired = cli.loss > 0.0 || cli.latency_ms > 0 || cli.jitter_ms > 0;
    if impaired {
        let link = LinkConfig {
            latency: Duration::from_millis(cli.latency_ms),
            jitter: Duration::from_millis(cli.jitter_ms),
            loss: cli.loss,
            ..LinkConfig::default()
        };
        udp = udp.with_impairment(link, cli.seed);
    }
    let opts = PlayOptions {
        timeout: Duration::from_secs(cli.timeout_s),
        frames: cli
            .speculate
            .then_some(lockstep::peer::udp::SPECULATION_FRAME),
        ..PlayOptions::default()
    };
    let (seed, apm) = (cli.seed, cli.apm);
    let stop = AtomicBool::new(false);
    let mut saved = rejoin.is_some();
    play(
        &mut udp,
        |p| bot(p, seed, apm),
        &opts,
        &stop,
        |peer, now| {
            if !saved && let (Some(path), Some(slot)) = (&cli.rejoin_file, peer.rejoin_secret()) {
                saved = true;
                if let Err(e) = write_rejoin(path, &cli.match_name, slot) {
                    eprintln!("peer: cannot write {}: {e}", path.display());
                }
            }
            // Before the start there are no turns to report: say what it waits for.
            if peer.world().is_some() {
                eprintln!("{}", lockstep::peer::progress_line(&peer.stats(now)));
            } else {
                eprintln!(
                    "peer: {}",
                    lockstep::peer::waiting_line(&cli.match_name, peer.lobby())
                );
            }
        },
    )
    .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !(0.0..=1.0).contains(&cli.loss) {
        eprintln!("peer: --loss must be within 0..1");
        return ExitCode::from(2);
    }
    let bind = if cli.relay.ip().is_loopback() && cli.bind.ip().is_unspecified() {
        SocketAddr::from(([127, 0, 0, 1], cli.bind.port()))
    } else {
        cli.bind
    };
    let socket = match UdpSocket::bind(bind) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("peer: cannot bind {bind}: {e}");
            return ExitCode::from(1);
        }
    };
    let token = match cli.token.as_deref().map(ConnectToken::from_hex).transpose() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("peer: bad --token: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.game {
        Game::Rts => run::<sim::game::World, _>(
            &cli,
            socket,
            token,
            cli.ticks_per_turn,
            |w, t| w.perturb(t.0),
            |player, seed, apm| sim::bot::Bot::new(player, seed, apm.unwrap_or(300)),
        ),
        Game::Arena => run::<sim::arena::Arena, _>(
            &cli,
            socket,
            token,
            cli.ticks_per_turn,
            |w, t| w.perturb(t.0),
            |player, seed, apm| {
                sim::arena::Bot::new(player, seed, apm.unwrap_or(sim::arena::BOT_APM))
            },
        ),
    };
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            eprintln!("peer: {e}");
            return ExitCode::from(1);
        }
    };
    if cli.json {
        match serde_json::to_string_pretty(&summary) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("peer: {e}"),
        }
    } else {
        println!(
            "player {}  turns {}  final turn {}  final hash {}",
            summary.player.map_or("-".to_owned(), |p| format!("P{p}")),
            summary.turns,
            summary.final_turn.map_or("-".to_owned(), |t| t.to_string()),
            summary.final_hash.as_deref().unwrap_or("-"),
        );
        println!(
            "stall {:.0} ms  latency p50 {:.0} ms p99 {:.0} ms  rtt {:.1} ms  loss {:.1}%  {:.0} bytes/s",
            summary.stall_ms,
            summary.turn_latency_ms.p50,
            summary.turn_latency_ms.p99,
            summary.rtt_ms,
            summary.loss * 100.0,
            summary.bytes_per_s
        );
        for d in &summary.desyncs {
            println!(
                "DESYNC at turn {}: odd players {:?}, sections {:?}",
                d.turn, d.odd_players, d.sections
            );
        }
        for (p, t) in &summary.dropped {
            println!("player P{p} dropped at turn {t}");
        }
        if let (Some(f), Some(s)) = (summary.own_feedback_ms, summary.speculation) {
            println!(
                "speculation: own command shown p50 {:.1} ms p99 {:.1} ms  frames {}  fallbacks {}  corrections {} ({:.0}/min)",
                f.p50, f.p99, s.frames, s.fallbacks, s.corrections, s.corrections_per_min
            );
        }
        if let Some(ms) = summary.rejoin_ms {
            println!("rejoined: caught up {ms:.0} ms after reconnecting");
        }
        // An error is a diagnostic: stderr, like every other error.
        if let Some(e) = &summary.error {
            eprintln!("peer: error: {e}");
        }
    }
    if let Some(r) = &summary.refused {
        eprintln!("refused by the relay: {r}");
        ExitCode::from(5)
    } else if !summary.desyncs.is_empty() {
        ExitCode::from(3)
    } else if summary.ended == Some(EndReason::Shutdown) {
        eprintln!("match ended: relay shutting down");
        ExitCode::from(4)
    } else if summary.completed && summary.error.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
