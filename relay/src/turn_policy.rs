//! When the relay closes a turn: `strict` waits for every player's input,
//! `deadline` also closes at the turn's deadline so a laggard cannot freeze
//! the others (its input then lands in the next open turn).

use std::fmt;
use std::str::FromStr;

/// The rule for closing a turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TurnPolicy {
    /// Close only when every live player's input (possibly empty) is in.
    Strict,
    /// Close when every input is in, or when the turn's deadline passes.
    #[default]
    Deadline,
}

impl TurnPolicy {
    /// Whether a turn closes now, given whether all inputs are in and whether
    /// its deadline has passed.
    #[must_use]
    pub const fn should_close(self, all_in: bool, deadline_passed: bool) -> bool {
        match self {
            Self::Strict => all_in,
            Self::Deadline => all_in || deadline_passed,
        }
    }
}

impl fmt::Display for TurnPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Strict => "strict",
            Self::Deadline => "deadline",
        })
    }
}

/// A policy name that is neither `strict` nor `deadline`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown turn policy {0:?} (expected strict or deadline)")]
pub struct UnknownPolicy(pub String);

impl FromStr for TurnPolicy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "strict" => Ok(Self::Strict),
            "deadline" => Ok(Self::Deadline),
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
    }
}
