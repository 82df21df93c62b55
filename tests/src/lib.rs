//! Harness for end-to-end tests: spawns a relay and peers over loopback UDP.
