//! Relay settings: turn length, closing policy, input-delay adaptation,
//! timeouts and memory limits.

use crate::limits::Limits;
use crate::turn_policy::TurnPolicy;
use lockstep::Duration;

/// How the relay runs matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayConfig {
    /// Length of one turn (default 100 ms).
    pub turn_length: Duration,
    /// When turns close (default `deadline`).
    pub policy: TurnPolicy,
    /// Input delay at the start of a match, in turns.
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
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            turn_length: Duration::from_millis(100),
            policy: TurnPolicy::Deadline,
            initial_delay: 3,
            deadline_lead: Duration::from_millis(20),
            adaptive_delay: true,
            min_delay: 1,
            max_delay: 30,
            delay_margin: Duration::from_millis(20),
            shrink_hold: Duration::from_secs(5),
            silence_timeout: Duration::from_secs(5),
            ping_interval: Duration::from_millis(250),
            ticks_per_turn: sim::game::DEFAULT_TICKS_PER_TURN,
            seed: None,
            end_grace: Duration::from_secs(2),
            limits: Limits::default(),
        }
    }
}
