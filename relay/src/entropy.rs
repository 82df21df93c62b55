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

/// A key read from a key file, and what the operator should hear about it.
#[derive(Debug)]
pub struct KeyFile {
    /// The key (never all zeros).
    pub key: [u8; 32],
    /// Set when the file is readable by its group or by others: anyone
    /// who can read it can issue tokens or compute rejoin secrets.
    pub warning: Option<String>,
}

/// Parses a key written as 64 hex digits (surrounding whitespace ignored).
///
/// # Errors
/// A message naming the text when it is not 64 hex digits.
pub fn parse_key(text: &str) -> Result<[u8; 32], String> {
    let text = text.trim();
    let bad = || format!("`{text}` is not 64 hex digits");
    if text.len() != 64 || !text.is_ascii() {
        return Err(bad());
    }
    let mut key = [0u8; 32];
    for (i, b) in key.iter_mut().enumerate() {
        let digits = text.get(2 * i..2 * i + 2).ok_or_else(bad)?;
        *b = u8::from_str_radix(digits, 16).map_err(|_| bad())?;
    }
    Ok(key)
}

/// Reads a key file (64 hex digits); with `create`, a missing one is made
/// with a fresh key from the OS CSPRNG, readable by its owner only. One
/// mechanism for the token key and the rejoin key: an all-zero key is
/// refused (a placeholder, not a secret), and a file readable by group or
/// others comes back with a warning to print (the key still loads: the
/// operator may share it on purpose, but should hear about it).
///
/// # Errors
/// A message naming the file: unreadable, not 64 hex digits, all zeros,
/// or (with `create`) not creatable.
pub fn read_key_file(path: &std::path::Path, create: bool, what: &str) -> Result<KeyFile, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let key = parse_key(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            if key == [0; 32] {
                return Err(format!(
                    "{}: the key is all zeros; draw it from a random source",
                    path.display()
                ));
            }
            Ok(KeyFile {
                key,
                warning: loose_permissions(path),
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
            let key = os_random(what).map_err(|e| e.to_string())?;
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let mut f = opts
                .open(path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
            io::Write::write_all(&mut f, format!("{hex}\n").as_bytes())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(KeyFile { key, warning: None })
        }
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// The warning for a key file its group or others may read (Unix only:
/// elsewhere the permission model differs and nothing is said).
fn loose_permissions(path: &std::path::Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
        (mode & 0o077 != 0).then(|| {
            format!(
                "{} is readable by {} (mode {mode:o}): anyone who reads it holds the key; \
                 chmod 600 it",
                path.display(),
                if mode & 0o007 != 0 {
                    "others"
                } else {
                    "its group"
                }
            )
        })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_key_file(name: &str, text: &str, mode: u32) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("relay-keyfile-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        std::fs::write(&path, text).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        #[cfg(not(unix))]
        let _ = mode;
        path
    }

    /// An all-zero key file is refused (token key and rejoin key alike),
    /// a good one loads, and one its group or others can read loads with a
    /// warning.
    #[test]
    fn key_files_refuse_zeros_and_warn_when_others_can_read_them() {
        let zeros = temp_key_file("zeros", &format!("{}\n", "0".repeat(64)), 0o600);
        let e = read_key_file(&zeros, false, "a test").unwrap_err();
        assert!(e.contains("all zeros"), "{e}");
        let good = format!("{}\n", "ab".repeat(32));
        let private = temp_key_file("private", &good, 0o600);
        let k = read_key_file(&private, false, "a test").unwrap();
        assert_eq!(k.key, [0xAB; 32]);
        assert!(k.warning.is_none());
        #[cfg(unix)]
        for (mode, who) in [(0o640, "its group"), (0o644, "others")] {
            let open = temp_key_file(&format!("open{mode:o}"), &good, mode);
            let k = read_key_file(&open, false, "a test").unwrap();
            let w = k.warning.expect("a warning");
            assert!(w.contains(who) && w.contains("chmod 600"), "{w}");
        }
        assert!(read_key_file(&private.with_extension("none"), false, "x").is_err());
    }

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
