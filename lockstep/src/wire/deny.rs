//! Why a server refuses a connection request, and its one-byte wire form.

use super::DecodeError;

/// Why the server refused a connection request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenyReason {
    /// The server has no free connection slot.
    Full,
    /// The request named another protocol id.
    WrongProtocol,
    /// The join token did not open (forged, corrupted or another relay's key).
    InvalidToken,
    /// A token-mode server got a request without a join token.
    TokenMissing,
    /// The join token has expired.
    TokenExpired,
    /// The join token was already used from another address.
    TokenReused,
    /// An open-mode server got a join token it cannot check.
    TokenUnexpected,
    /// A data packet came for a connection the server does not know: it
    /// restarted (or dropped the connection). Sent with a zero salt, so a
    /// client acts on it only after its connection has been silent a while
    /// (see `Client`): on a healthy link a forged one changes nothing.
    UnknownConnection,
}

impl std::fmt::Display for DenyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The peer-facing text lives with the protocol's reject reasons.
        std::fmt::Display::fmt(&crate::proto::RejectReason::from(*self), f)
    }
}

impl DenyReason {
    pub(super) fn to_byte(self) -> u8 {
        match self {
            Self::Full => 1,
            Self::WrongProtocol => 2,
            Self::InvalidToken => 3,
            Self::TokenMissing => 4,
            Self::TokenExpired => 5,
            Self::TokenReused => 6,
            Self::TokenUnexpected => 7,
            Self::UnknownConnection => 8,
        }
    }
    pub(super) fn from_byte(b: u8, at: usize) -> Result<Self, DecodeError> {
        match b {
            1 => Ok(Self::Full),
            2 => Ok(Self::WrongProtocol),
            3 => Ok(Self::InvalidToken),
            4 => Ok(Self::TokenMissing),
            5 => Ok(Self::TokenExpired),
            6 => Ok(Self::TokenReused),
            7 => Ok(Self::TokenUnexpected),
            8 => Ok(Self::UnknownConnection),
            _ => Err(DecodeError::NonCanonical {
                what: "deny reason",
                at,
            }),
        }
    }
}
