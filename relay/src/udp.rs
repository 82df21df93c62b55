//! The one-loop entry points of [`crate::serve`] under the path they were
//! first published at (`relay::udp::serve`, `relay::udp::RelayNote`, ...),
//! kept for the games and documents that name it. Nothing here but these
//! names: the serve loop is one module, [`crate::serve`]; new code names
//! that.

pub use crate::serve::{
    REFUSAL_NOTES_PER_SEC, RelayNote, ServeOptions, process_secret, serve, serve_with,
};
