//! Behaviour tests of the arena (filled below).
