//! For relay implementers and tests; no stability promise.
//!
//! The cores under [`crate::peer`]: the sans-IO transport (`Client`,
//! `Server`, channels, authentication modes), the relay protocol's messages
//! (`proto`), the datagram format (`wire`), the lockstep session and its
//! builder and events (`session`), and the small pieces a relay built on
//! them shares with the peer (send backlogs, the connection-to-session glue,
//! the timer schedule). A game needs none of it: [`crate::peer::PeerBuilder`]
//! wires them together. What is here may change in any release.

pub use crate::rng::Rng;
pub use crate::turn_buffer::MAX_BUFFERED_AHEAD;

/// The sans-IO lockstep session under the peer: its builder, its events, its
/// statistics and its playout (jitter buffer) settings.
pub mod session {
    pub use crate::builder::{BuildError, DEFAULT_UPLOAD_CHUNK, SessionBuilder, SessionConfig};
    pub use crate::event::Event;
    pub use crate::session::*;
}

/// Bounded per-connection send backlogs and the log of what they dropped.
pub mod backlog {
    pub use crate::backlog::{
        Backlog, DropCause, DropLog, MAX_BACKLOG, MAX_BACKLOG_BYTES, MAX_DROP_REPORTS, SendDrop,
        refused,
    };
}

/// The glue between a transport connection and a session (message channels).
pub mod peer_glue {
    pub use crate::peer_glue::*;
}

/// The relay protocol's messages, peer to relay and back, and their limits.
pub mod proto {
    pub use crate::proto::{
        BUNDLE_TAG_LEN, Bundle, BundleTag, DecodeError, Delivery, DesyncDetails, DesyncEntity,
        DesyncField, DesyncReport, EndReason, EntityDump, Heal, Join, MAX_BUNDLE_ENTRIES,
        MAX_BUNDLE_INPUT_BYTES, MAX_BUNDLE_LEN, MAX_CARRY_BYTES, MAX_DETAIL_ENTITIES,
        MAX_DETAIL_FIELDS, MAX_DETAILS_LEN, MAX_DUMP_ENTITIES, MAX_ENTITY_HASHES,
        MAX_HAND_BACK_TURNS, MAX_INPUT_BYTES, MAX_INPUT_CHUNKS, MAX_INPUT_DELAY, MAX_MESSAGE_LEN,
        MAX_NAME_LEN, MAX_PLAYER_TURN_BYTES, MAX_PLAYER_TURN_ENTRIES, MAX_REASON_LEN,
        MAX_SNAPSHOT_CHUNK, MAX_SNAPSHOT_CHUNK_MESSAGE, Notice, PROTOCOL_VERSION, PeerReport,
        PlayerInfo, Reconnect, Reconnected, RejectReason, Rejoin, RejoinSecret, Reoffer, Resume,
        Rewatch, SnapshotChunk, Start, ToPeer, ToRelay, decode_turn, player_turn_bytes,
    };
}

/// A timer schedule keyed by owner: the next deadline of many timers.
pub mod schedule {
    pub use crate::schedule::*;
}

/// The sans-IO transport: `Client`, `Server`, channels, authentication, link figures.
pub mod transport {
    pub use crate::transport::*;
}

/// The datagram format: headers, packet limits, bulk framing, decoding.
pub mod wire {
    pub use crate::wire::{
        AuthKind, CONNECT_REQUEST_LEN, Cookie, DecodeError, DenyReason, Fragment, Frame, Header,
        MAX_PACKET, Packet, TAG_LEN, VERSION, decode, decode_header, encode_frame, header_len,
    };
}
