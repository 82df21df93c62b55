//! Secrets from the operating system. Every secret the relay makes (the
//! handshake cookie secret of `relay serve`, a key written by
//! `relay token --create-key`, the entropy sealed into each join token)
//! comes from the OS CSPRNG through the `getrandom` crate, never from the
//! time, the pid or a seeded generator. Without an OS random source the
//! caller stops with a clear message instead of falling back to anything
//! guessable.

use std::io;

/// 32 bytes from the operating system's CSPRNG. Use it for anything an
/// attacker must not guess; `what` names the use in the error message.
///
/// # Errors
/// [`io::ErrorKind::Other`], with a message for the user, when the OS random
/// source is unavailable.
pub fn os_random(what: &str) -> io::Result<[u8; 32]> {
    random_from(what, getrandom::fill)
}

/// [`os_random`] over any source, so the failure path can be tested.
fn random_from(
    what: &str,
    fill: impl FnOnce(&mut [u8]) -> Result<(), getrandom::Error>,
) -> io::Result<[u8; 32]> {
    let mut b = [0u8; 32];
    fill(&mut b).map_err(|e| {
        io::Error::other(format!(
            "the operating system's random number generator is unavailable ({e}); \
             it is needed for {what}"
        ))
    })?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_come_from_the_os_and_differ_per_call() {
        let a = os_random("a test").unwrap();
        let b = os_random("a test").unwrap();
        assert_ne!(a, b);
        assert_ne!(a, [0; 32]);
    }

    #[test]
    fn without_an_os_random_source_the_error_says_what_is_missing_and_why() {
        let e = random_from("the handshake cookie secret", |_| {
            Err(getrandom::Error::UNSUPPORTED)
        })
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("random number generator is unavailable"),
            "{text}"
        );
        assert!(text.contains("the handshake cookie secret"), "{text}");
    }
}
