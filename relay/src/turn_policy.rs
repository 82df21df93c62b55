//! When the relay closes a turn: `clock` (the default) closes each turn on
//! the relay's own clock and stamps every input into the turn it closes
//! next, so each player's command latency is its own RTT plus half a turn;
//! `strict` waits for every player's input; `deadline` also closes at the
//! turn's deadline so a laggard cannot freeze the others (its input then
//! lands in the next open turn). `strict` and `deadline` run on an input
//! delay that follows the worst player's RTT.

use std::fmt;
use std::str::FromStr;

/// The rule for closing a turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TurnPolicy {
    /// Close only when every live player's input (possibly empty) is in.
    Strict,
    /// Close when every input is in, or when the turn's deadline passes.
    Deadline,
    /// Close each turn on the relay's clock, one turn length after it
    /// opened, with whatever inputs arrived; every input goes into the turn
    /// the relay closes next (no input delay). Use it unless you need every
    /// player's input in every turn (`strict`).
    #[default]
    Clock,
}

impl TurnPolicy {
    /// Whether a turn closes now, given whether all inputs are in and whether
    /// its deadline has passed.
    #[must_use]
    pub const fn should_close(self, all_in: bool, deadline_passed: bool) -> bool {
        match self {
            Self::Strict => all_in,
            Self::Deadline => all_in || deadline_passed,
            Self::Clock => deadline_passed,
        }
    }
}

impl fmt::Display for TurnPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Strict => "strict",
            Self::Deadline => "deadline",
            Self::Clock => "clock",
        })
    }
}

/// A policy name that is neither `strict` nor `deadline`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown turn policy {0:?} (expected clock, strict or deadline)")]
pub struct UnknownPolicy(pub String);

impl FromStr for TurnPolicy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "strict" => Ok(Self::Strict),
            "deadline" => Ok(Self::Deadline),
            "clock" => Ok(Self::Clock),
            other => Err(UnknownPolicy(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_waits_deadline_does_not() {
        assert!(!TurnPolicy::Strict.should_close(false, true));
        assert!(TurnPolicy::Strict.should_close(true, false));
        assert!(TurnPolicy::Deadline.should_close(false, true));
        assert!(!TurnPolicy::Deadline.should_close(false, false));
        assert_eq!("strict".parse(), Ok(TurnPolicy::Strict));
        assert!("x".parse::<TurnPolicy>().is_err());
        // `clock` closes by its clock only, never early.
        assert!(!TurnPolicy::Clock.should_close(true, false));
        assert!(TurnPolicy::Clock.should_close(false, true));
        assert_eq!("clock".parse(), Ok(TurnPolicy::Clock));
        assert_eq!(TurnPolicy::default(), TurnPolicy::Clock);
    }
}
