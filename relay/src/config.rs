//! Relay settings: turn length, closing policy, input-delay adaptation,
//! timeouts and memory limits.

use crate::limits::Limits;
use crate::turn_policy::TurnPolicy;
use lockstep::Duration;

/// Simulation ticks per turn unless configured (`relay serve
/// --ticks-per-turn`): the peers' default too, one constant for both (the
/// relay itself never simulates; the value travels in the setup, and peers
/// compute their rules fingerprint for it).
pub use lockstep::peer::DEFAULT_TICKS_PER_TURN;

/// What the relay does when a match desyncs (`relay serve --on-desync`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DesyncPolicy {
    /// Report the desync and play on (every later disputed turn is recorded).
    #[default]
    Continue,
    /// Report the desync, then end the match for everyone with
    /// `EndReason::Desync` once its forensics report is done (at most
    /// `forensics_timeout` later).
    End,
    /// Report the desync, then re-synchronise the odd players from the
    /// latest agreed snapshot and the bundle tail on their live connections
    /// (the rejoin path, without a reconnect) while the others play on.
    /// Refused, with a note in the report, when there is no majority (two
    /// players): the match then continues as with `Continue`.
    Heal,
}

/// How often `--on-desync heal` may heal one player (see
/// [`RelayConfig::heal_limit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealLimit {
    /// Heals of one player allowed within `window` (default 3; 0: a desync
    /// drops its odd players instead of healing them).
    pub heals: u32,
    /// The window, in match time (default 60 s; counted in turns of the
    /// match's turn length).
    pub window: Duration,
}

impl Default for HealLimit {
    /// 3 heals a minute: an honest peer that desyncs now and then (a heal
    /// costs it a snapshot and the tail) is never near it; a peer that
    /// desyncs again right after each heal is broken or lying, and dropping
    /// it bounds what it costs the relay and the others.
    fn default() -> Self {
        Self {
            heals: 3,
            window: Duration::from_secs(60),
        }
    }
}

/// How the relay runs matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayConfig {
    /// Length of one turn (default 100 ms).
    pub turn_length: Duration,
    /// When turns close (default `clock`: by the relay's clock, no input delay).
    pub policy: TurnPolicy,
    /// Input delay at the start of a match, in turns (`strict` and
    /// `deadline`; `clock` has none).
    pub initial_delay: u8,
    /// How long before a turn is due at the peers its deadline falls, so a
    /// bundle closed by the deadline still arrives in time despite jitter
    /// and scheduling delays (default 20 ms, at most a quarter turn).
    pub deadline_lead: Duration,
    /// Whether the input delay follows the players' RTT.
    pub adaptive_delay: bool,
    /// Smallest delay the adaptation may choose.
    pub min_delay: u8,
    /// Largest delay the adaptation may choose.
    pub max_delay: u8,
    /// Safety margin added to the high-percentile RTT before dividing by the turn length.
    pub delay_margin: Duration,
    /// How long a lower delay must be enough before the delay shrinks by one.
    pub shrink_hold: Duration,
    /// A player silent this long is dropped.
    pub silence_timeout: Duration,
    /// How often the relay pings each player to measure RTT.
    pub ping_interval: Duration,
    /// Simulation ticks per turn, sent in the match setup.
    pub ticks_per_turn: u16,
    /// World seed for every match; derived from the match name and number if `None`.
    pub seed: Option<u64>,
    /// Margin of the wait for the final hashes after the last turn closed:
    /// the relay waits until that turn is due at the peers (at least the
    /// current input delay in turn lengths) plus the slowest player's RTT,
    /// plus this; the match ends as soon as every hash is in.
    pub end_grace: Duration,
    /// Memory bounds.
    pub limits: Limits,
    /// What to do when a match desyncs (default: continue).
    pub on_desync: DesyncPolicy,
    /// How long desync forensics waits for the peers' answers before
    /// reporting what it has (default 10 s).
    pub forensics_timeout: Duration,
    /// `--on-desync heal`: how often one player may be healed. A desync
    /// that would heal a player already healed `heals` times within the
    /// last `window` of match time drops it instead
    /// ([`DropReason::TooManyHeals`](crate::DropReason::TooManyHeals), its
    /// slot given up): a player that lies about its hash after every heal
    /// otherwise costs the relay a snapshot and the honest peers a desync
    /// notice on every turn.
    pub heal_limit: HealLimit,
    /// Agreed snapshots and held slots (rejoin).
    pub rejoin: crate::rejoin_config::RejoinConfig,
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            turn_length: Duration::from_millis(100),
            policy: TurnPolicy::Clock,
            initial_delay: 3,
            deadline_lead: Duration::from_millis(20),
            adaptive_delay: true,
            min_delay: 1,
            max_delay: 30,
            delay_margin: Duration::from_millis(20),
            shrink_hold: Duration::from_secs(5),
            silence_timeout: Duration::from_secs(5),
            ping_interval: Duration::from_millis(250),
            ticks_per_turn: DEFAULT_TICKS_PER_TURN,
            seed: None,
            end_grace: Duration::from_secs(2),
            limits: Limits::default(),
            on_desync: DesyncPolicy::Continue,
            forensics_timeout: Duration::from_secs(10),
            heal_limit: HealLimit::default(),
            rejoin: crate::rejoin_config::RejoinConfig::default(),
        }
    }
}

/// A [`RelayConfig`] value outside what the relay and its peers can run
/// with (a zero turn length, a delay peers refuse, ...): found at start-up by
/// [`RelayConfig::validate`] instead of as a match that stalls.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting {flag} = {value}: {allowed}")]
pub struct InvalidSetting {
    /// The command-line flag that sets it (or the field name, for settings
    /// only the library exposes).
    pub flag: &'static str,
    /// The value given.
    pub value: String,
    /// The allowed range, for humans.
    pub allowed: String,
}

/// Longest turn the relay accepts.
pub const MAX_TURN_LENGTH: Duration = Duration::from_secs(10);

impl RelayConfig {
    /// The transport settings of the relay's side for matches run with this
    /// config: `base` with its ack delay stretched to one turn (at least
    /// `base`'s, at most 250 ms). The relay sends every peer a bundle each
    /// turn, so an ack it owes waits for the next bundle instead of leaving
    /// in an ack-only packet of its own (about half the datagrams it sent a
    /// peer with the 25 ms default); four unanswered packets still get an
    /// ack at once. The peers learn this hold from the relay's headers and
    /// wait for it before they resend. `relay serve`, `relay demo` and the
    /// benchmarks build their relay's transport with it.
    #[must_use]
    pub fn server_transport(
        &self,
        base: lockstep::low_level::transport::TransportConfig,
    ) -> lockstep::low_level::transport::TransportConfig {
        lockstep::low_level::transport::TransportConfig {
            ack_delay: self
                .turn_length
                .min(Duration::from_millis(250))
                .max(base.ack_delay),
            ..base
        }
    }

    /// Checks every setting against what the relay and the peers accept;
    /// the first bad one is returned, naming its flag and the allowed range.
    /// `relay serve`/`relay demo` call it at start-up, and
    /// [`serve_with`](crate::serve::serve_with) refuses an invalid config.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        use lockstep::low_level::proto::MAX_INPUT_DELAY;
        fn bad(flag: &'static str, value: impl ToString, allowed: String) -> InvalidSetting {
            InvalidSetting {
                flag,
                value: value.to_string(),
                allowed,
            }
        }
        let ms = |d: Duration| format!("{} ms", d.as_millis_f64());
        let turn = self.turn_length;
        if turn < Duration::from_millis(1) || turn > MAX_TURN_LENGTH {
            return Err(bad(
                "--turn-ms",
                ms(turn),
                format!("1 ms ..= {}", ms(MAX_TURN_LENGTH)),
            ));
        }
        if self.min_delay < 1 || self.min_delay > self.max_delay {
            return Err(bad(
                "min_delay",
                self.min_delay,
                format!("1 ..= max_delay ({})", self.max_delay),
            ));
        }
        if self.max_delay > MAX_INPUT_DELAY {
            return Err(bad(
                "max_delay",
                self.max_delay,
                format!("min_delay ({}) ..= {MAX_INPUT_DELAY} turns", self.min_delay),
            ));
        }
        // A fixed delay may be anything peers accept; an adaptive one starts
        // inside the range it adapts in.
        let (lo, hi) = if self.adaptive_delay {
            (self.min_delay, self.max_delay)
        } else {
            (1, MAX_INPUT_DELAY)
        };
        if self.initial_delay < lo || self.initial_delay > hi {
            return Err(bad(
                "--input-delay",
                self.initial_delay,
                format!(
                    "{lo} ..= {hi} turns{}",
                    if self.adaptive_delay {
                        " (the adaptive range; with --fixed-delay up to 50)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        // `deadline_lead` needs no check: it is used as at most a quarter turn.
        if self.ticks_per_turn == 0 {
            return Err(bad("ticks_per_turn", 0, "1 ..= 65535".into()));
        }
        if self.ping_interval < Duration::from_millis(1)
            || self.ping_interval > Duration::from_secs(10)
        {
            return Err(bad(
                "ping_interval",
                ms(self.ping_interval),
                "1 ms ..= 10000 ms".into(),
            ));
        }
        let min_silence = self.ping_interval.saturating_mul(2).max(turn);
        if self.silence_timeout < min_silence || self.silence_timeout > Duration::from_secs(3600) {
            return Err(bad(
                "--silence-timeout-ms",
                ms(self.silence_timeout),
                format!(
                    "{} (two ping intervals, at least one turn) ..= 3600000 ms",
                    ms(min_silence)
                ),
            ));
        }
        let l = &self.limits;
        // Peers send input `delay` turns ahead: the relay must accept that far.
        if l.max_turns_ahead < u32::from(self.max_delay.max(self.initial_delay)) {
            return Err(bad(
                "limits.max_turns_ahead",
                l.max_turns_ahead,
                format!(
                    "at least the largest input delay ({})",
                    self.max_delay.max(self.initial_delay)
                ),
            ));
        }
        let r = &self.rejoin;
        if r.max_tail_turns == 0 || r.max_tail_turns > crate::rejoin_config::MAX_TAIL_TURNS {
            return Err(bad(
                "rejoin.max_tail_turns",
                r.max_tail_turns,
                format!("1 ..= {}", crate::rejoin_config::MAX_TAIL_TURNS),
            ));
        }
        // The tail must outlast one snapshot interval, or no snapshot is
        // ever usable.
        if r.snapshot_every >= r.max_tail_turns {
            return Err(bad(
                "--snapshot-every",
                r.snapshot_every,
                format!(
                    "0 ..= {} turns (below the tail limit)",
                    r.max_tail_turns - 1
                ),
            ));
        }
        for (flag, v) in [
            ("limits.max_connections", l.max_connections),
            ("limits.max_matches", l.max_matches),
            ("limits.max_hash_turns", l.max_hash_turns),
            ("--max-connections-per-host", l.max_connections_per_host),
        ] {
            if v == 0 {
                return Err(bad(flag, 0, "at least 1".into()));
            }
        }
        if l.bundle_bytes_per_sec < 1024 {
            return Err(bad(
                "--bundle-kib-per-s",
                l.bundle_bytes_per_sec / 1024,
                "at least 1 KiB/s".into(),
            ));
        }
        // One bundle of the largest size must fit, or a single turn would
        // cut a connection off.
        let floor = lockstep::low_level::proto::MAX_MESSAGE_LEN;
        if l.max_backlog_bytes < floor {
            return Err(bad(
                "--max-backlog-kib",
                l.max_backlog_bytes / 1024,
                format!("at least {} KiB (the largest message)", floor / 1024),
            ));
        }
        for (flag, v) in [
            ("limits.messages_per_sec", l.messages_per_sec),
            ("limits.message_burst", l.message_burst),
        ] {
            if v == 0 {
                return Err(bad(flag, 0, "at least 1".into()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relay_holds_its_acks_for_about_one_turn() {
        use lockstep::low_level::transport::TransportConfig;
        let base = TransportConfig::default();
        let at = |ms: u64| {
            let c = RelayConfig {
                turn_length: Duration::from_millis(ms),
                ..RelayConfig::default()
            };
            c.server_transport(base).ack_delay.as_millis_f64()
        };
        assert_eq!(at(100), 100.0);
        assert_eq!(at(33), 33.0);
        // Never below the default, never above 250 ms.
        assert_eq!(at(16), 25.0);
        assert_eq!(at(1000), 250.0);
    }

    #[test]
    fn defaults_are_valid_and_each_bad_setting_names_its_flag() {
        assert_eq!(RelayConfig::default().validate(), Ok(()));
        let check = |f: fn(&mut RelayConfig), flag: &str| {
            let mut c = RelayConfig::default();
            f(&mut c);
            let e = c.validate().unwrap_err();
            assert_eq!(e.flag, flag, "{e}");
            e.to_string()
        };
        let e = check(|c| c.turn_length = Duration::ZERO, "--turn-ms");
        assert_eq!(e, "invalid setting --turn-ms = 0 ms: 1 ms ..= 10000 ms");
        check(|c| c.turn_length = Duration::from_secs(11), "--turn-ms");
        check(|c| c.initial_delay = 0, "--input-delay");
        check(|c| c.initial_delay = 31, "--input-delay");
        check(
            |c| {
                c.adaptive_delay = false;
                c.initial_delay = 51;
            },
            "--input-delay",
        );
        check(|c| c.max_delay = 51, "max_delay");
        check(|c| c.min_delay = 0, "min_delay");
        check(|c| c.min_delay = 31, "min_delay");
        check(
            |c| c.silence_timeout = Duration::ZERO,
            "--silence-timeout-ms",
        );
        check(|c| c.ping_interval = Duration::ZERO, "ping_interval");
        check(|c| c.ticks_per_turn = 0, "ticks_per_turn");
        check(|c| c.limits.max_turns_ahead = 10, "limits.max_turns_ahead");
        check(|c| c.limits.max_connections = 0, "limits.max_connections");
        check(|c| c.limits.messages_per_sec = 0, "limits.messages_per_sec");
        check(|c| c.rejoin.snapshot_every = 400, "--snapshot-every");
        check(|c| c.rejoin.max_tail_turns = 513, "rejoin.max_tail_turns");
        check(
            |c| c.limits.bundle_bytes_per_sec = 1000,
            "--bundle-kib-per-s",
        );
        check(
            |c| c.limits.max_backlog_bytes = 64 * 1024,
            "--max-backlog-kib",
        );
        // A fixed delay of 25 (the clean-end example) is valid.
        let fixed = RelayConfig {
            adaptive_delay: false,
            initial_delay: 25,
            ..RelayConfig::default()
        };
        assert_eq!(fixed.validate(), Ok(()));
    }
}
