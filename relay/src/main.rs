//! `relay`: serve lockstep matches over UDP (`relay serve`), or run a whole
//! recorded and verified match locally in one command (`relay demo`), or
//! issue a join token for one player (`relay token`).

use clap::{Args, Parser, Subcommand};
use lockstep::Duration;
use lockstep::low_level::transport::{AuthMode, TransportConfig};
use lockstep::netsim::LinkConfig;
use lockstep::token::{MatchInstance, TokenClaims, TokenKey, issue_token};
use relay::config::DesyncPolicy;
use relay::demo::{DemoConfig, DemoGame, run};
use relay::games::known_rules_hash;
use relay::metrics::Metrics;
use relay::recorder::Recorder;
use relay::serve::ServeOptions;
use relay::{RelayConfig, TurnPolicy};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

// Results on stdout, diagnostics on stderr, and no panic on a closed pipe
// (`| head`): these shadow the std macros for the whole binary.
use replays::err_println as eprintln;
use replays::{out_print as print, out_println as println};

#[path = "main_logs.rs"]
mod logs;
use logs::{Level, log_line, log_note, out_line};

#[derive(Parser)]
#[command(
    name = "relay",
    version,
    about = "Relay server for deterministic lockstep matches"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve matches on a UDP address, recording each to a replay file.
    /// SIGTERM/SIGINT drain (running matches end after `--grace-s`);
    /// SIGUSR2 hands them over: the relay exits at once without ending
    /// them, and the next `relay serve` on the same `--record-dir` and
    /// `--rejoin-key-file` resumes them.
    // Boxed: the serve flags outweigh the other commands' several times.
    Serve(Box<ServeArgs>),
    /// Run a whole match locally: a relay and N headless peers over loopback UDP.
    Demo(DemoArgs),
    /// Issue a join token (hex) admitting one player to one match and slot,
    /// or (`--spectator`) one spectator to one match.
    Token(TokenArgs),
}

#[derive(Args)]
struct TokenArgs {
    /// Match the token admits.
    #[arg(long = "match")]
    match_name: String,
    /// Slot (player position) the token admits (required unless `--spectator`).
    #[arg(
        long,
        required_unless_present = "spectator",
        conflicts_with = "spectator"
    )]
    slot: Option<u8>,
    /// A spectator token: it admits watching the match (`peer --spectate`),
    /// never playing in it; a player token cannot spectate.
    #[arg(long)]
    spectator: bool,
    /// The match instance (32 hex digits), the same in every token of one
    /// match: draw one per match (e.g. `openssl rand -hex 16`). The relay
    /// binds the match to it and refuses tokens of another instance of the
    /// same name, so an earlier match's tokens cannot enter a later one.
    /// Without it the token carries the all-zero instance, shared by every
    /// such token of the name (no protection across matches of one name).
    #[arg(long, value_parser = parse_instance)]
    instance: Option<MatchInstance>,
    /// Lifetime: `60s`, `5m`, `1h` or plain seconds.
    #[arg(long, default_value = "60s", value_parser = parse_lifetime)]
    expires_in: u64,
    /// File holding the relay's token key as 64 hex digits.
    #[arg(long)]
    key_file: PathBuf,
    /// Create the key file with a fresh random key (mode 0600) if it does not exist.
    #[arg(long)]
    create_key: bool,
    /// Relay address written into the token (repeat for several); a host
    /// name is resolved here, IPv4 first (the token holds addresses).
    #[arg(long = "relay", default_value = "127.0.0.1:7777", value_parser = resolve_addr)]
    relays: Vec<SocketAddr>,
    /// Print a JSON object (token, match, instance, kind, slot, expiry)
    /// instead of the bare hex token.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Clone)]
struct RelayArgs {
    /// Turn closing policy: `clock` (the relay closes turns on its clock and
    /// stamps each input into the next one: each player's latency is its own
    /// RTT + half a turn), `deadline` (input delay; late inputs move to the
    /// next turn) or `strict` (input delay; waits for everyone).
    #[arg(long, default_value = "clock")]
    policy: TurnPolicy,
    /// Turn length in milliseconds.
    #[arg(long, default_value_t = 100)]
    turn_ms: u64,
    /// Simulation ticks per turn, sent to every peer in the match's setup
    /// (1 or more). Peers compute their join's rules fingerprint for it: give
    /// them the same value (`PeerBuilder::with_ticks_per_turn`, `peer
    /// --ticks-per-turn`).
    #[arg(long, default_value_t = relay::config::DEFAULT_TICKS_PER_TURN,
          value_parser = clap::value_parser!(u16).range(1..))]
    ticks_per_turn: u16,
    /// Input delay at the start, in turns.
    #[arg(long, default_value_t = 3)]
    input_delay: u8,
    /// Keep the input delay fixed instead of adapting it to RTT and jitter.
    #[arg(long)]
    fixed_delay: bool,
    /// Drop a player silent this long (ms).
    #[arg(long, default_value_t = 5000)]
    silence_timeout_ms: u64,
    /// What a desync does: `continue` (report it, play on), `end` (report
    /// it, then end the match with reason `desync`) or `heal` (report it,
    /// then re-synchronise the odd players from the agreed snapshot).
    #[arg(long, value_enum, default_value_t = OnDesyncArg::Continue)]
    on_desync: OnDesyncArg,
    /// Ask a player for an agreed snapshot every this many turns (0: never;
    /// a rejoin then needs the bundle tail to reach back to the first turn).
    #[arg(long, default_value_t = relay::rejoin_config::DEFAULT_SNAPSHOT_EVERY)]
    snapshot_every: u32,
    /// Hold a dropped player's slot this long for its rejoin (ms).
    #[arg(long, default_value_t = 120_000)]
    rejoin_hold_ms: u64,
    /// A match resumed after a restart waits this long for its players
    /// (ms); then it plays on without the missing ones, or ends abandoned.
    #[arg(long, default_value_t = 30_000)]
    resume_wait_ms: u64,
    /// Spectators watch this far behind live (ms; 0 for a LAN).
    #[arg(long, default_value_t = 3000)]
    spectator_delay_ms: u64,
    /// Most spectators per match.
    #[arg(long, default_value_t = relay::rejoin_config::DEFAULT_MAX_SPECTATORS)]
    max_spectators: usize,
    /// Most connections from one host (an IPv4 address or an IPv6 /64),
    /// counted once the handshake completed; enough for a LAN party behind
    /// one NAT by default.
    #[arg(long, default_value_t = relay::limits::DEFAULT_MAX_CONNECTIONS_PER_HOST)]
    max_connections_per_host: usize,
    /// Turn bundle bytes a match may send each connection per second
    /// (KiB/s): each player's share of a turn is cut to fit, and input over
    /// it is refused (the peer is told), so bundles never outrun a
    /// connection's pacing.
    #[arg(long, default_value_t = relay::limits::DEFAULT_BUNDLE_BYTES_PER_SEC / 1024)]
    bundle_kib_per_s: usize,
    /// Messages one connection may have waiting for its window (KiB); a
    /// receiver that far behind is cut off (reason `backpressure`).
    #[arg(long, default_value_t = relay::limits::DEFAULT_MAX_BACKLOG_BYTES / 1024)]
    max_backlog_kib: usize,
    /// `--on-desync heal`: heals one player may get per minute; one more
    /// drops it (0: a desync drops its odd players instead of healing).
    #[arg(long, default_value_t = relay::config::HealLimit::default().heals)]
    max_heals_per_min: u32,
}

/// `--on-desync` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OnDesyncArg {
    /// Report the desync and play on.
    Continue,
    /// Report the desync, then end the match for everyone.
    End,
    /// Report the desync, then re-synchronise the odd players.
    Heal,
}

impl RelayArgs {
    fn config(&self) -> RelayConfig {
        RelayConfig {
            policy: self.policy,
            turn_length: Duration::from_millis(self.turn_ms),
            ticks_per_turn: self.ticks_per_turn,
            initial_delay: self.input_delay,
            adaptive_delay: !self.fixed_delay,
            silence_timeout: Duration::from_millis(self.silence_timeout_ms),
            on_desync: match self.on_desync {
                OnDesyncArg::Continue => DesyncPolicy::Continue,
                OnDesyncArg::End => DesyncPolicy::End,
                OnDesyncArg::Heal => DesyncPolicy::Heal,
            },
            rejoin: relay::rejoin_config::RejoinConfig {
                snapshot_every: self.snapshot_every,
                hold: Duration::from_millis(self.rejoin_hold_ms),
                resume_wait: Duration::from_millis(self.resume_wait_ms),
                spectator_delay: Duration::from_millis(self.spectator_delay_ms),
                max_spectators: self.max_spectators,
                ..relay::rejoin_config::RejoinConfig::default()
            },
            limits: relay::limits::Limits {
                max_connections_per_host: self.max_connections_per_host,
                bundle_bytes_per_sec: self.bundle_kib_per_s.saturating_mul(1024),
                max_backlog_bytes: self.max_backlog_kib.saturating_mul(1024),
                ..relay::limits::Limits::default()
            },
            heal_limit: relay::config::HealLimit {
                heals: self.max_heals_per_min,
                window: Duration::from_secs(60),
            },
            ..RelayConfig::default()
        }
    }
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("live_view").args(["live", "http"])))]
struct ServeArgs {
    /// UDP address to listen on (a host name such as `localhost:7777` is
    /// resolved, IPv4 first).
    #[arg(long, default_value = "127.0.0.1:7777", value_parser = resolve_addr)]
    bind: SocketAddr,
    /// Directory for one replay file per match (no recording if omitted).
    /// Each recording is its match's write-ahead log: a relay started on a
    /// directory that holds unfinished matches (the previous process was
    /// killed or crashed) resumes them and waits for their players.
    #[arg(long)]
    record_dir: Option<PathBuf>,
    /// The key the players' rejoin secrets are derived from (64 hex digits;
    /// created, readable by its owner only, if missing). With it a
    /// restarted relay knows every seat's secret and resumes open-mode
    /// matches from `--record-dir`, and checks the tag its bundles carry so
    /// that players hand back the turns a machine crash lost; without it
    /// each process draws its own key (in token mode: derives it from the
    /// token key) and a restart ends open-mode matches. Keep it out of the
    /// record directory.
    #[arg(long)]
    rejoin_key_file: Option<PathBuf>,
    /// One JSON object per line instead of text logs.
    #[arg(long)]
    json: bool,
    /// Also log every closed turn and agreed hash (same as `--log-level debug`).
    #[arg(long)]
    verbose: bool,
    /// Least severe log level printed: error, warn, info or debug.
    #[arg(long, default_value = "info")]
    log_level: Level,
    /// On SIGTERM/SIGINT, how long running matches may go on before they are ended.
    #[arg(long, default_value_t = 30)]
    grace_s: u64,
    /// Most transport connections at once, over all event loops (the
    /// transport's own default is 64, i.e. only 16 four-player matches).
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// The relay's memory budget (MiB), split between connections with
    /// their send backlogs (60 %), snapshots (30 %) and recordings (10 %):
    /// at connections' share new connections, joins and spectators are
    /// refused (`memory_full`); at snapshots' no snapshot upload is asked
    /// for; at recordings' joins are refused. Running matches play on.
    #[arg(
        long,
        default_value_t = relay::limits::DEFAULT_MAX_MEMORY_BYTES as u64 / (1024 * 1024),
        value_parser = clap::value_parser!(u64).range(1..=(1 << 30))
    )]
    max_memory_mib: u64,
    /// Event loops (threads) to run, each with its own socket on the same
    /// port (SO_REUSEPORT); a match lives on one of them. Default: one per core.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Serve Prometheus metrics (`/metrics`) and `/health` on this address
    /// (TCP), on a listener of their own: nothing else is served there, so
    /// no browser ever delays a health probe.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Serve the live view on this address (TCP): the viewer page (`/watch`:
    /// the running matches, each watchable in a browser as a delayed
    /// spectator, fed over a WebSocket). Opt-in, on a listener apart from
    /// `--metrics`: its clients never share threads or caps with `/health`.
    #[arg(long, value_name = "ADDR")]
    live: Option<SocketAddr>,
    /// `--metrics` and `--live` on one address (one listener, whose clients
    /// share one cap of requests): the layout before the split, kept for
    /// existing scripts. Prefer the two flags.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["metrics", "live"])]
    http: Option<SocketAddr>,
    /// The viewer's WebAssembly module for `--live` (default:
    /// LOCKSTEP_VIEWER_WASM, else the workspace build of `cargo build
    /// --profile wasm -p lockstep-viewer --target wasm32-unknown-unknown`).
    /// Without it the page lists the matches and says how to build it.
    #[arg(long, value_name = "PATH", requires = "live_view")]
    viewer_wasm: Option<PathBuf>,
    /// Most browsers watching live at once (`--live`). Each is a spectator
    /// connection from this host: keep it within the per-host connection
    /// limit (`--max-connections-per-host`, default 16), which players on
    /// this machine share.
    #[arg(long, default_value_t = relay::live::DEFAULT_MAX_VIEWERS, requires = "live_view")]
    max_live_viewers: usize,
    /// A host name the live view is reached under (a DNS name, a reverse
    /// proxy's), repeatable. IP addresses and `localhost` are always
    /// accepted; a request naming any other `Host` is refused (DNS
    /// rebinding), and one from another site's page (`Origin`) too.
    #[arg(long, value_name = "NAME", requires = "live_view")]
    live_host: Vec<String>,
    /// Watchdog: `/health` answers 503 (and `relay_watchdog_trips_total`
    /// counts it) when the event loop has not completed an iteration for
    /// this many seconds, so an orchestrator restarts a wedged relay.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    watchdog_s: u64,
    /// Token mode: admit only holders of a join token sealed under the key in
    /// this file (64 hex digits, as written by `relay token --create-key`);
    /// each plays only in the token's match and slot.
    #[arg(long, conflicts_with = "open")]
    token_key_file: Option<PathBuf>,
    /// Open mode (the default without `--token-key-file`): anyone can join any match.
    #[arg(long)]
    open: bool,
    /// For tests only: the key (64 hex digits) of the hash that places each
    /// match on an event loop, so a test knows where a match lives. Without
    /// it (what a relay should do) the key comes from the OS CSPRNG and
    /// clients cannot pin every match to one loop.
    #[arg(long, hide = true, value_parser = parse_key)]
    home_key: Option<[u8; 32]>,
    /// Run as an Agones game server: speak the Agones SDK over its REST
    /// gateway on 127.0.0.1:$AGONES_SDK_HTTP_PORT (default 9358): labels,
    /// the `matches` counter and `players` list, Ready once bound, Health
    /// while healthy, Shutdown after the drain. On by itself when
    /// AGONES_SDK_HTTP_PORT is set. A missing or slow SDK server is logged;
    /// the relay serves all the same.
    #[arg(long)]
    agones: bool,
    /// Seconds between Agones Health pings (keep it below the Fleet's
    /// `health.periodSeconds`).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=300))]
    agones_health_s: u64,
    #[command(flatten)]
    relay: RelayArgs,
}

/// The shipped games `relay demo` can play.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum GameArg {
    /// The reference RTS (`lockstep-rts`).
    Rts,
    /// The arena shooter (`arena`).
    Arena,
}

#[derive(Args)]
struct DemoArgs {
    /// The game the bots play: the reference RTS or the arena shooter.
    #[arg(long, value_enum, default_value_t = GameArg::Rts)]
    game: GameArg,
    /// Number of peers.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(1..=i64::from(sim::MAX_PLAYERS)))]
    peers: u8,
    /// Turns to play.
    #[arg(long, default_value_t = 300)]
    turns: u32,
    /// Packet loss on every peer's link, each way (0..1).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// One-way latency added to every peer's link (ms).
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Jitter (±ms) on every peer's link.
    #[arg(long, default_value_t = 0)]
    jitter_ms: u64,
    /// Where the replay goes.
    #[arg(long, default_value = "demo-replays")]
    record_dir: PathBuf,
    /// Seed for bots, clients and impairment.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Bot actions per minute (default: 300 for rts, 1800 for arena).
    #[arg(long)]
    apm: Option<u32>,
    /// Fault switch: this turn, the `--desync-peer` perturbs its own world.
    #[arg(long, requires = "desync_peer")]
    desync_at: Option<u32>,
    /// Fault switch: which peer (0-based index) perturbs its world.
    #[arg(long, requires = "desync_at")]
    desync_peer: Option<u8>,
    /// Fault switch: this peer (0-based index) gets `--lag-ms` of extra latency.
    #[arg(long, requires = "lag_ms")]
    lag_peer: Option<u8>,
    /// Extra one-way latency (ms) on `--lag-peer`'s link, on top of `--latency-ms`.
    #[arg(long, requires = "lag_peer")]
    lag_ms: Option<u64>,
    /// Fault switch: this peer (0-based) crashes silently after `--kill-after-ms`.
    #[arg(long, requires = "kill_after_ms")]
    kill_peer: Option<u8>,
    /// See `--kill-peer`.
    #[arg(long, requires = "kill_peer")]
    kill_after_ms: Option<u64>,
    /// Restart the killed peer this long (ms) after it crashed: it comes
    /// back into its held slot with its rejoin secret, restores the relay's
    /// agreed snapshot, fast-forwards and plays on.
    #[arg(long, requires = "kill_peer")]
    rejoin_after_ms: Option<u64>,
    /// Spectators that join the running match (a third of the way in) and
    /// watch it to the end; each one's final hash is in the report.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=256))]
    spectators: u16,
    /// Every peer keeps a speculative view of its own commands (a world
    /// forked from the confirmed one, 60 frames a second); the report gives
    /// per peer how soon its own command showed (`own_feedback_ms`) and the
    /// view's frames, fallbacks and corrections (`speculation`).
    #[arg(long)]
    speculate: bool,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    relay: RelayArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(a) => serve_cmd(&a),
        Command::Demo(a) => demo_cmd(&a),
        Command::Token(a) => token_cmd(&a),
    }
}

fn parse_key(text: &str) -> Result<[u8; 32], String> {
    relay::entropy::parse_key(text)
}

/// Resolves an address flag (clap shows the error, naming the text, exit 2).
fn resolve_addr(text: &str) -> Result<SocketAddr, String> {
    lockstep::peer::udp::resolve(text).map_err(|e| e.to_string())
}

fn parse_instance(text: &str) -> Result<MatchInstance, String> {
    MatchInstance::from_hex(text).map_err(|e| e.to_string())
}

fn parse_lifetime(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a lifetime like 60s, 5m or 1h"))?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(format!("unknown unit `{unit}` (use s, m or h)")),
    };
    match n.checked_mul(scale) {
        Some(0) | None => Err(format!("lifetime `{text}` must be positive and finite")),
        Some(secs) => Ok(secs),
    }
}

fn load_or_create_key(path: &std::path::Path, create: bool) -> Result<TokenKey, String> {
    let key = key_file(path, create, "a new token key")?;
    TokenKey::try_from_bytes(key).map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads a key file ([`relay::entropy::read_key_file`]: all zeros refused,
/// a warning printed when its group or others may read it). One mechanism
/// for the token key and the rejoin key.
fn key_file(path: &std::path::Path, create: bool, what: &str) -> Result<[u8; 32], String> {
    let file = relay::entropy::read_key_file(path, create, what)?;
    if let Some(w) = file.warning {
        eprintln!("relay: warning: {w}");
    }
    Ok(file.key)
}

fn token_cmd(a: &TokenArgs) -> ExitCode {
    let key = match load_or_create_key(&a.key_file, a.create_key) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("relay token: {e}");
            return ExitCode::from(1);
        }
    };
    let now_unix = replays::format::unix_now_ms() / 1000;
    let protocol_id = TransportConfig::default().protocol_id;
    let claims = match a.slot {
        Some(slot) if !a.spectator => TokenClaims::new(
            protocol_id,
            a.match_name.clone(),
            slot,
            now_unix,
            a.expires_in,
        ),
        _ => TokenClaims::spectator(protocol_id, a.match_name.clone(), now_unix, a.expires_in),
    }
    .with_instance(a.instance.unwrap_or_default());
    let entropy = match relay::entropy::os_random("the token's entropy") {
        Ok(b) => b,
        Err(e) => {
            eprintln!("relay token: {e}");
            return ExitCode::from(1);
        }
    };
    let token = match issue_token(&key, &claims, &a.relays, &entropy) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("relay token: {e}");
            return ExitCode::from(2);
        }
    };
    if a.json {
        let relays: Vec<String> = a.relays.iter().map(ToString::to_string).collect();
        println!(
            "{}",
            serde_json::json!({
                "token": token.to_hex(), "match": claims.match_name,
                "instance": claims.instance.to_hex(),
                "kind": if a.spectator { "spectator" } else { "player" },
                "slot": if a.spectator { None } else { Some(claims.slot) },
                "create_unix": claims.create_unix, "expire_unix": claims.expire_unix,
                "relays": relays,
            })
        );
    } else {
        println!("{}", token.to_hex());
    }
    ExitCode::SUCCESS
}

/// The relay settings of `serve`/`demo`, validated: a bad one is reported on
/// stderr with its flag and allowed range (exit 2) before anything starts.
fn valid_config(a: &RelayArgs) -> Result<RelayConfig, ExitCode> {
    let config = a.config();
    config.validate().map_err(|e| {
        eprintln!("relay: {e}");
        ExitCode::from(2)
    })?;
    // Rejoin secrets are keyed with a fresh OS secret (the default key of
    // `RejoinConfig`): nobody can compute another player's secret, and it
    // dies with the process.
    Ok(config)
}

/// The relay's UDP address: the first socket's, else the flag's.
fn addr_of(sockets: &[UdpSocket], bind: SocketAddr) -> SocketAddr {
    sockets
        .first()
        .and_then(|s| s.local_addr().ok())
        .unwrap_or(bind)
}

/// Where a live view's bridge, on this machine, reaches the relay: its
/// address, with loopback for an unspecified one (`0.0.0.0`, `::`).
fn addr_for_bridge(udp: SocketAddr) -> SocketAddr {
    let ip = match udp.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    SocketAddr::new(ip, udp.port())
}

/// The live view's settings: the viewer's module if it is built (a missing
/// one is a warning: the page still lists the matches).
fn live_config(
    a: &ServeArgs,
    relay_addr: SocketAddr,
    auth: &AuthMode,
) -> Result<relay::live::LiveConfig, ExitCode> {
    let wasm = match replays::web::find_viewer_wasm(a.viewer_wasm.as_deref()) {
        Some(path) => match std::fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if a.viewer_wasm.is_some() => {
                eprintln!("relay: cannot read --viewer-wasm {}: {e}", path.display());
                return Err(ExitCode::from(2));
            }
            Err(e) => {
                eprintln!(
                    "relay: live view without a viewer: {}: {e}; {}",
                    path.display(),
                    replays::web::missing_wasm_hint("--viewer-wasm")
                );
                None
            }
        },
        None => {
            eprintln!(
                "relay: live view lists matches only: {}",
                replays::web::missing_wasm_hint("--viewer-wasm")
            );
            None
        }
    };
    // Each live view connects from this host: more than the per-host limit
    // admits would only be refused one by one later.
    if a.max_live_viewers > a.relay.max_connections_per_host {
        eprintln!(
            "relay: --max-live-viewers {} is above --max-connections-per-host {}: at most {} views can connect (fewer with local players)",
            a.max_live_viewers, a.relay.max_connections_per_host, a.relay.max_connections_per_host
        );
    }
    Ok(relay::live::LiveConfig {
        relay: relay_addr,
        wasm,
        max_viewers: a.max_live_viewers,
        token_key: match auth {
            AuthMode::Tokens { key, .. } => Some(key.clone()),
            AuthMode::Open => None,
        },
        transport: TransportConfig::default(),
        allowed_hosts: a.live_host.clone(),
        spectator_delay: std::time::Duration::from_millis(a.relay.spectator_delay_ms),
    })
}

/// Binds an HTTP listener for `flag`, or says why not (exit code 1).
fn bind_http(
    flag: &str,
    addr: SocketAddr,
) -> Result<(std::net::TcpListener, SocketAddr), ExitCode> {
    match relay::http::bind(addr) {
        Ok(l) => {
            let shown = l.local_addr().unwrap_or(addr);
            Ok((l, shown))
        }
        Err(e) => {
            eprintln!("relay: cannot bind {flag} {addr}: {e}");
            Err(ExitCode::from(1))
        }
    }
}

/// What the event loops feed of the HTTP side: the counters (`--metrics`)
/// and the live view (`--live`), each when served.
type HttpSide = (Option<Arc<Metrics>>, Option<Arc<relay::live::Live>>);

/// Starts the HTTP side (see `relay::http`): `--metrics` (`/metrics` and
/// `/health`) and `--live` (the live view) on listeners of their own, or
/// both on the one of `--http`. Returns the counters the event loops
/// publish and the live view they tell about matches; prints each address
/// (a start-up fact, at any level like `listening`).
fn start_http(
    a: &ServeArgs,
    threads: usize,
    sockets: &[UdpSocket],
    auth: &AuthMode,
) -> Result<HttpSide, ExitCode> {
    let metrics_at = a.metrics.or(a.http);
    let live_at = a.live.or(a.http);
    // Agones needs the counters too: its Health pings follow `/health`.
    let metrics = (metrics_at.is_some() || agones_on(a)).then(|| {
        Arc::new(
            Metrics::new()
                .with_watchdog(std::time::Duration::from_secs(a.watchdog_s))
                .with_loops(threads),
        )
    });
    let live = match live_at {
        Some(_) => Some(Arc::new(relay::live::Live::new(live_config(
            a,
            addr_for_bridge(addr_of(sockets, a.bind)),
            auth,
        )?))),
        None => None,
    };
    let never = || Arc::new(AtomicBool::new(false));
    let started = match (a.http, &metrics, &live) {
        (Some(addr), Some(m), Some(l)) => {
            let (listener, shown) = bind_http("--http", addr)?;
            relay::http::spawn_shared(listener, Arc::clone(m), Arc::clone(l), never())
                .map(|_| (Some(shown), Some(shown)))
        }
        _ => {
            let mut shown = (None, None);
            let mut r = Ok(());
            if let (Some(addr), Some(m)) = (a.metrics, &metrics) {
                let (listener, at) = bind_http("--metrics", addr)?;
                shown.0 = Some(at);
                r = relay::http::spawn_metrics(listener, Arc::clone(m), never()).map(drop);
            }
            if let (Ok(()), Some(addr), Some(l)) = (&r, a.live, &live) {
                let (listener, at) = bind_http("--live", addr)?;
                shown.1 = Some(at);
                r = relay::http::spawn_live(listener, Arc::clone(l), never()).map(drop);
            }
            r.map(|()| shown)
        }
    };
    let (metrics_shown, live_shown) = match started {
        Ok(shown) => shown,
        Err(e) => {
            eprintln!("relay: cannot start the http thread: {e}");
            return Err(ExitCode::from(1));
        }
    };
    if let Some(at) = metrics_shown {
        if a.json {
            out_line(
                &serde_json::json!({ "event": "metrics", "addr": at.to_string() }).to_string(),
            );
        } else {
            eprintln!("relay: metrics on http://{at}/metrics");
        }
    }
    if let Some(at) = live_shown {
        if a.json {
            out_line(
                &serde_json::json!({
                    "event": "watch",
                    "addr": at.to_string(),
                    "url": format!("http://{at}/watch"),
                })
                .to_string(),
            );
        } else {
            eprintln!("relay: watch live at http://{at}/watch");
        }
    }
    Ok((metrics, live))
}

/// The matches a previous relay process left unfinished in `dir`, to
/// resume; each file that cannot be is named with the reason (a
/// `not_resumed` line with `--json`, else on stderr) and left as it is: the
/// relay starts whatever it finds. `seats_provable`: the players can prove
/// their seats to this process (a rejoin key file, or token mode);
/// otherwise nothing is resumed and the operator is told why.
fn resumable(
    dir: &std::path::Path,
    config: &RelayConfig,
    seats_provable: bool,
    json: bool,
) -> Vec<relay::resume::Unfinished> {
    let max_tail = config
        .rejoin
        .max_tail_turns
        .min(relay::rejoin_config::MAX_TAIL_TURNS) as usize;
    // Without a way to prove seats nothing is resumed, and nothing in the
    // directory is touched (a torn tail stays for a relay that can).
    if !seats_provable {
        let (found, skipped) = relay::resume::survey(dir);
        let reason = "its players' rejoin secrets came from the previous process's key (start the relay with --rejoin-key-file to keep one across restarts)";
        for path in &found {
            not_resumed(path, reason, json);
        }
        for s in &skipped {
            not_resumed(&s.path, &s.reason, json);
        }
        return Vec::new();
    }
    let (found, skipped) = relay::resume::scan(dir, max_tail, config.limits.max_resumed());
    for s in &skipped {
        not_resumed(&s.path, &s.reason, json);
    }
    for m in &found {
        if json {
            let v = serde_json::json!({ "event": "resuming", "level": "info",
                "match": m.match_id(), "name": m.match_name(), "next_turn": m.next_turn().0,
                "path": m.path.display().to_string(), "cut_bytes": m.cut_bytes });
            out_line(&v.to_string());
        } else {
            eprintln!(
                "relay: resuming match {:?} (number {}) at turn {} from {}{}",
                m.match_name(),
                m.match_id(),
                m.next_turn().0,
                m.path.display(),
                if m.cut_bytes > 0 {
                    format!(" ({} bytes of a torn last record cut)", m.cut_bytes)
                } else {
                    String::new()
                }
            );
        }
    }
    found
}

/// A recording `relay serve` does not resume, and why: a start-up fact,
/// printed at any level like `listening`.
fn not_resumed(path: &std::path::Path, reason: &str, json: bool) {
    if json {
        let v = serde_json::json!({ "event": "not_resumed", "level": "warn",
            "path": path.display().to_string(), "reason": reason });
        out_line(&v.to_string());
    } else {
        eprintln!("relay: not resuming {}: {reason}", path.display());
    }
}

fn serve_cmd(a: &ServeArgs) -> ExitCode {
    let mut config = match valid_config(&a.relay) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(path) = &a.rejoin_key_file {
        let key = key_file(path, true, "a new rejoin key").and_then(|k| {
            relay::rejoin_config::RejoinKey::from_bytes(&k).map_err(|e| e.to_string())
        });
        match key {
            Ok(k) => config.rejoin.key = k,
            Err(e) => {
                eprintln!("relay: bad --rejoin-key-file: {e}");
                return ExitCode::from(2);
            }
        }
    }
    // The cookie secret comes from the OS CSPRNG: without one, stop at
    // start-up with a clear message rather than serve with a guessable key.
    if let Err(e) = relay::serve::process_secret() {
        eprintln!("relay: {e}");
        return ExitCode::from(1);
    }
    let auth = match &a.token_key_file {
        Some(path) => match key_file(path, false, "a new token key").and_then(|bytes| {
            let key =
                TokenKey::try_from_bytes(bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok((key, bytes))
        }) {
            Ok((key, bytes)) => {
                // Without a rejoin key file, the rejoin key follows from
                // the token key (under its own context, so neither tells
                // the other): the next process then checks the tags on the
                // bundles this one sends, and players hand back after a
                // machine crash as with a rejoin key file.
                if a.rejoin_key_file.is_none() {
                    let derived =
                        blake3::derive_key("lockstep relay rejoin key from token key v1", &bytes);
                    if let Ok(k) = relay::rejoin_config::RejoinKey::from_bytes(&derived) {
                        config.rejoin.key = k;
                    }
                }
                AuthMode::Tokens {
                    key,
                    unix_at_zero: 0,
                }
            }
            Err(e) => {
                eprintln!("relay: bad --token-key-file: {e}");
                return ExitCode::from(2);
            }
        },
        None => AuthMode::Open,
    };
    let threads = a
        .threads
        .map_or_else(relay::serve::default_threads, usize::from);
    let bound = if threads == 1 {
        UdpSocket::bind(a.bind).map(|s| vec![s])
    } else {
        relay::serve::bind_reuseport(a.bind, threads)
    };
    let sockets = match bound {
        Ok(s) => s,
        Err(e) => {
            eprintln!("relay: cannot bind {}: {e}", a.bind);
            return ExitCode::from(1);
        }
    };
    // Matches the previous process left unfinished: the first recorder
    // holds them until the serve loops place each on its home loop.
    let provable = a.rejoin_key_file.is_some() || auth != AuthMode::Open;
    // A relay that can resume its matches tags their bundles: after a
    // machine crash it adopts the turns its players hand back only with
    // its tag, so none of them can hand back commands in another's name.
    config.rejoin.tag_bundles = a.record_dir.is_some() && provable;
    let mut found = a
        .record_dir
        .as_deref()
        .map(|dir| resumable(dir, &config, provable, a.json))
        .unwrap_or_default();
    // One recorder per event loop: each records the matches its loop hosts.
    let mut recorders = Vec::with_capacity(threads);
    for _ in 0..threads {
        recorders.push(match &a.record_dir {
            Some(dir) => match Recorder::new(dir, known_rules_hash) {
                Ok(r) => Some(r.with_resumable(std::mem::take(&mut found))),
                Err(e) => {
                    eprintln!("relay: cannot use {}: {e}", dir.display());
                    return ExitCode::from(1);
                }
            },
            None => None,
        });
    }
    let stop = Arc::new(AtomicBool::new(false));
    // SIGTERM (orchestrators) and SIGINT (Ctrl-C) both start a graceful
    // drain. Installed before the first start-up line: whoever reacts to
    // `listening` may signal at once.
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("relay: cannot install the handler for signal {sig}: {e}");
            return ExitCode::from(1);
        }
    }
    // SIGUSR2 hands the running matches over to the next process (an
    // upgrade): the relay stops at once without ending them.
    let handover = Arc::new(AtomicBool::new(false));
    if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGUSR2, Arc::clone(&handover))
    {
        eprintln!("relay: cannot install the handler for SIGUSR2: {e}");
        return ExitCode::from(1);
    }
    let addr = sockets
        .first()
        .and_then(|s| s.local_addr().ok())
        .unwrap_or(a.bind);
    if a.json {
        out_line(
            &serde_json::json!({ "event": "listening", "addr": addr.to_string(), "threads": threads })
                .to_string(),
        );
    } else {
        eprintln!(
            "relay: listening on {addr} ({} policy, {threads} event loop{})",
            a.relay.policy,
            if threads == 1 { "" } else { "s" }
        );
    }
    // A start-up fact, printed at any level like `listening`.
    let open = auth == AuthMode::Open;
    if a.json {
        out_line(
            &serde_json::json!({
                "event": "auth",
                "mode": if open { "open" } else { "tokens" },
                "level": if open { "warn" } else { "info" },
                "explicit": a.open,
                "note": if open { "open mode: anyone can join any match" } else { "token mode: join tokens required" },
            })
            .to_string(),
        );
    } else if open {
        eprintln!(
            "relay: OPEN MODE: anyone can join any match (use --token-key-file to require join tokens)"
        );
    } else {
        eprintln!("relay: token mode: only holders of a join token may connect");
    }
    let level = if a.verbose { Level::Debug } else { a.log_level };
    let (metrics, live) = match start_http(a, threads, &sockets, &auth) {
        Ok(started) => started,
        Err(code) => return code,
    };
    // The socket is bound: an Agones relay tells the SDK it is Ready.
    let agones = match (agones_on(a), &metrics) {
        (true, Some(m)) => {
            let resumes = a.record_dir.is_some() && provable;
            match start_agones(a, &config, threads, m, &stop, resumes, level) {
                Ok(ag) => Some(ag),
                Err(code) => return code,
            }
        }
        _ => None,
    };
    let opts = ServeOptions {
        stop: &stop,
        handover: Some(&handover),
        grace: Duration::from_secs(a.grace_s),
        metrics,
        auth,
        home_key: a.home_key,
        max_memory: usize::try_from(a.max_memory_mib.saturating_mul(1024 * 1024))
            .unwrap_or(usize::MAX),
    };
    let transport = config.server_transport(TransportConfig {
        max_connections: a.max_connections,
        ..TransportConfig::default()
    });
    let r = relay::serve::serve_loops(sockets, config, transport, recorders, &opts, &|n| {
        if let (Some(live), relay::serve::RelayNote::Event(ev, unix_ms)) = (&live, &n) {
            live.handle_event(ev, *unix_ms);
        }
        if let Some(ag) = &agones {
            match &n {
                relay::serve::RelayNote::Event(ev, _) => ag.handle_event(ev),
                relay::serve::RelayNote::Draining { .. } => ag.begin_drain(),
                _ => {}
            }
        }
        log_note(&n, a.json, level);
    });
    // The drain is over: Shutdown (not after a hand-over, whose matches
    // the next process in this pod resumes).
    if let Some(ag) = agones
        && !handover.load(std::sync::atomic::Ordering::Relaxed)
    {
        let answered = ag.finish(AGONES_SHUTDOWN_WAIT);
        log_line(
            level,
            if answered { Level::Info } else { Level::Warn },
            a.json,
            serde_json::json!({ "event": "agones_shutdown", "answered": answered }),
        );
    }
    if r.is_ok() {
        log_line(
            level,
            Level::Info,
            a.json,
            serde_json::json!({ "event": "stopped" }),
        );
    }
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("relay: socket error: {e}");
            ExitCode::from(1)
        }
    }
}

/// How long a stopped relay waits for the Agones SDK to take Shutdown.
const AGONES_SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether `serve` speaks the Agones SDK: `--agones`, or the SDK's
/// environment (AGONES_SDK_HTTP_PORT) is present.
fn agones_on(a: &ServeArgs) -> bool {
    a.agones || relay::agones::sdk_present()
}

/// Starts the Agones side (see `relay::agones`): its capacities from the
/// relay's budgets, its labels, Health pings while `/health` would answer
/// 200 and the serve loop is not stopping; its notes go to the log.
fn start_agones(
    a: &ServeArgs,
    config: &RelayConfig,
    threads: usize,
    metrics: &Arc<Metrics>,
    stop: &Arc<AtomicBool>,
    resumes: bool,
    level: Level,
) -> Result<relay::agones::Agones, ExitCode> {
    let matches = config.limits.max_matches.saturating_mul(threads);
    let players = a.max_connections;
    let mut ac = match relay::agones::AgonesConfig::from_env(
        i64::try_from(matches).unwrap_or(i64::MAX),
        i64::try_from(players).unwrap_or(i64::MAX),
    ) {
        Ok(c) => c
            .with_label("relay-version", env!("CARGO_PKG_VERSION"))
            .with_label("resumes", if resumes { "true" } else { "false" }),
        Err(e) => {
            eprintln!("relay: --agones: {e}");
            return Err(ExitCode::from(2));
        }
    };
    ac.health_every = std::time::Duration::from_secs(a.agones_health_s);
    log_line(
        level,
        Level::Info,
        a.json,
        serde_json::json!({ "event": "agones", "port": ac.port,
            "agones_version": relay::agones::AGONES_VERSION,
            "matches_capacity": ac.matches_capacity, "players_capacity": ac.players_capacity }),
    );
    let (m, s) = (Arc::clone(metrics), Arc::clone(stop));
    let healthy = move || {
        !s.load(std::sync::atomic::Ordering::Relaxed) && m.healthy(std::time::Instant::now())
    };
    let json = a.json;
    relay::agones::Agones::start(ac, healthy, move |n| {
        let (at, v) = logs::agones_json(&n);
        log_line(level, at, json, v);
    })
    .map_err(|e| {
        eprintln!("relay: --agones: {e}");
        ExitCode::from(2)
    })
}

fn demo_cmd(a: &DemoArgs) -> ExitCode {
    if !(0.0..=1.0).contains(&a.loss) {
        eprintln!("relay demo: --loss must be within 0..1");
        return ExitCode::from(2);
    }
    let relay = match valid_config(&a.relay) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let impaired = a.loss > 0.0 || a.latency_ms > 0 || a.jitter_ms > 0;
    let game = match a.game {
        GameArg::Rts => DemoGame::Rts,
        GameArg::Arena => DemoGame::Arena,
    };
    let config = DemoConfig {
        game,
        peers: a.peers,
        turns: a.turns,
        relay,
        impair: impaired.then(|| LinkConfig {
            latency: Duration::from_millis(a.latency_ms),
            jitter: Duration::from_millis(a.jitter_ms),
            loss: a.loss,
            ..LinkConfig::default()
        }),
        record_dir: a.record_dir.clone(),
        seed: a.seed,
        apm: a.apm.unwrap_or_else(|| game.default_apm()),
        desync: a.desync_at.zip(a.desync_peer),
        peer_impair: a
            .lag_peer
            .zip(a.lag_ms)
            .map(|(p, ms)| {
                (
                    p,
                    LinkConfig {
                        latency: Duration::from_millis(a.latency_ms + ms),
                        jitter: Duration::from_millis(a.jitter_ms),
                        loss: a.loss,
                        ..LinkConfig::default()
                    },
                )
            })
            .into_iter()
            .collect(),
        vanish: a
            .kill_peer
            .zip(a.kill_after_ms)
            .map(|(p, ms)| (p, Duration::from_millis(ms))),
        rejoin_after: a.rejoin_after_ms.map(Duration::from_millis),
        spectators: a.spectators,
        speculate: a.speculate,
    };
    if [a.desync_peer, a.lag_peer, a.kill_peer]
        .into_iter()
        .flatten()
        .any(|p| p >= a.peers)
    {
        eprintln!("relay demo: peer indices must be below --peers");
        return ExitCode::from(2);
    }
    eprintln!(
        "relay demo: {} peers, {} turns{}",
        a.peers,
        a.turns,
        if impaired {
            format!(
                ", link loss {:.0}% latency {} ms jitter ±{} ms",
                a.loss * 100.0,
                a.latency_ms,
                a.jitter_ms
            )
        } else {
            String::new()
        }
    );
    let report = match run(&config, |line| eprintln!("  {line}")) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("relay demo: {e}");
            return ExitCode::from(1);
        }
    };
    if a.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("relay demo: {e}"),
        }
    } else {
        print!("{}", report.table());
        println!("took {:.1} s", report.seconds);
    }
    ExitCode::from(u8::try_from(report.exit_code()).unwrap_or(1))
}
