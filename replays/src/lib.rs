//! Replay files: crash-safe, checksummed command logs of lockstep matches.
