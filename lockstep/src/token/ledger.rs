//! The server's memory of used join tokens: token id → the address that used
//! it, kept until the token expires, so a copied token cannot be used from a
//! second address. Entries are added only after a full cookie round trip with
//! a valid token, pruned in expiry order, and capped.

use super::NONCE_LEN;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

/// Most token ids remembered at once (a few MiB at most); when all are unexpired,
/// new token connections are refused rather than forgetting one.
pub const MAX_TRACKED_TOKENS: usize = 65_536;

/// The ledger is full of unexpired tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LedgerFull;

/// Most admitted handshake cookies remembered at once (about 3 MiB at
/// most); when all are unexpired, new connections are refused rather than
/// forgetting one (a forgotten cookie could be admitted a second time).
pub const MAX_ADMITTED_COOKIES: usize = 65_536;

/// Length of the cookie MAC that names one handshake.
const COOKIE_ID_LEN: usize = crate::wire::COOKIE_LEN;

/// What [`UsedTokens::admit_cookie`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CookieAdmission {
    /// Never admitted before: it is now remembered until it expires.
    Fresh,
    /// Already admitted once (a captured handshake replayed).
    Replayed,
    /// The table is full of unexpired cookies.
    Full,
}

#[derive(Debug, Default)]
pub(crate) struct UsedTokens {
    by_id: BTreeMap<[u8; NONCE_LEN], (SocketAddr, u64)>,
    by_expiry: BTreeSet<(u64, [u8; NONCE_LEN])>,
    /// Every handshake cookie that opened a connection, by its MAC, with
    /// the server time (µs) after which the cookie is refused as expired
    /// anyway: a cookie admits at most once, so a captured handshake
    /// replayed within the cookie's lifetime builds no second connection.
    cookies: BTreeSet<[u8; COOKIE_ID_LEN]>,
    cookies_by_expiry: BTreeSet<(u64, [u8; COOKIE_ID_LEN])>,
}

impl UsedTokens {
    /// Forgets tokens that have expired at `now_unix` (they are refused as expired anyway).
    pub(crate) fn prune(&mut self, now_unix: u64) {
        while let Some(&(expire, id)) = self.by_expiry.first() {
            if expire > now_unix {
                break;
            }
            self.by_expiry.pop_first();
            self.by_id.remove(&id);
        }
    }

    /// Whether `id` was used from an address other than `from`.
    pub(crate) fn used_elsewhere(&self, id: &[u8; NONCE_LEN], from: SocketAddr) -> bool {
        matches!(self.by_id.get(id), Some((addr, _)) if *addr != from)
    }

    /// Records that `from` connected with token `id` (call after `used_elsewhere` said no).
    pub(crate) fn record(
        &mut self,
        id: [u8; NONCE_LEN],
        from: SocketAddr,
        expire_unix: u64,
        now_unix: u64,
    ) -> Result<(), LedgerFull> {
        self.prune(now_unix);
        if self.by_id.contains_key(&id) {
            return Ok(());
        }
        if self.by_id.len() >= MAX_TRACKED_TOKENS {
            return Err(LedgerFull);
        }
        self.by_id.insert(id, (from, expire_unix));
        self.by_expiry.insert((expire_unix, id));
        Ok(())
    }

    /// Token ids currently remembered.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Records that the cookie `mac`, valid until server time
    /// `expires_micros` (inclusive), opens a connection, unless it already
    /// opened one. Servers sharing this ledger share the cookie secret and
    /// the clock, so a cookie admitted by one is refused by all.
    pub(crate) fn admit_cookie(
        &mut self,
        mac: [u8; COOKIE_ID_LEN],
        expires_micros: u64,
        now_micros: u64,
    ) -> CookieAdmission {
        self.prune_cookies(now_micros);
        if self.cookies.contains(&mac) {
            return CookieAdmission::Replayed;
        }
        if self.cookies.len() >= MAX_ADMITTED_COOKIES {
            return CookieAdmission::Full;
        }
        self.cookies.insert(mac);
        self.cookies_by_expiry.insert((expires_micros, mac));
        CookieAdmission::Fresh
    }

    /// Forgets cookies that expired before server time `now_micros` (they
    /// are refused as expired before this table is asked).
    pub(crate) fn prune_cookies(&mut self, now_micros: u64) {
        while let Some(&(expires, mac)) = self.cookies_by_expiry.first() {
            if expires >= now_micros {
                break;
            }
            self.cookies_by_expiry.pop_first();
            self.cookies.remove(&mac);
        }
    }

    /// Admitted cookies currently remembered.
    pub(crate) fn cookies_len(&self) -> usize {
        self.cookies.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_until_expiry_then_forgets_in_order() {
        let a: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:1".parse().unwrap();
        let mut l = UsedTokens::default();
        l.record([1; NONCE_LEN], a, 100, 10).unwrap();
        l.record([2; NONCE_LEN], a, 50, 10).unwrap();
        l.record([1; NONCE_LEN], a, 100, 10).unwrap();
        assert_eq!(l.len(), 2);
        assert!(l.used_elsewhere(&[1; NONCE_LEN], b));
        assert!(!l.used_elsewhere(&[1; NONCE_LEN], a));
        assert!(!l.used_elsewhere(&[3; NONCE_LEN], b));
        l.prune(50);
        assert_eq!(l.len(), 1);
        assert!(!l.used_elsewhere(&[2; NONCE_LEN], b));
        l.prune(100);
        assert_eq!(l.len(), 0);
    }

    /// A cookie admits once, is remembered through the last microsecond of
    /// its lifetime and forgotten after it; a full table refuses.
    #[test]
    fn a_cookie_admits_once_until_it_expires() {
        let mut l = UsedTokens::default();
        assert_eq!(l.admit_cookie([1; 16], 100, 0), CookieAdmission::Fresh);
        assert_eq!(l.admit_cookie([1; 16], 100, 100), CookieAdmission::Replayed);
        assert_eq!(l.admit_cookie([2; 16], 100, 100), CookieAdmission::Fresh);
        l.prune_cookies(101);
        assert_eq!(l.cookies_len(), 0);
        for i in 0..MAX_ADMITTED_COOKIES as u32 {
            let mut mac = [0; 16];
            mac[..4].copy_from_slice(&i.to_le_bytes());
            assert_eq!(l.admit_cookie(mac, 1_000, 200), CookieAdmission::Fresh);
        }
        assert_eq!(
            l.admit_cookie([0xEE; 16], 1_000, 200),
            CookieAdmission::Full
        );
        assert_eq!(
            l.admit_cookie([0xEE; 16], 2_000, 1_001),
            CookieAdmission::Fresh
        );
    }

    #[test]
    fn refuses_rather_than_forgets_when_full() {
        let a: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let mut l = UsedTokens::default();
        for i in 0..MAX_TRACKED_TOKENS as u32 {
            let mut id = [0; NONCE_LEN];
            id[..4].copy_from_slice(&i.to_le_bytes());
            l.record(id, a, 1_000, 0).unwrap();
        }
        assert_eq!(l.record([0xEE; NONCE_LEN], a, 1_000, 0), Err(LedgerFull));
        // Once they expire there is room again.
        assert_eq!(l.record([0xEE; NONCE_LEN], a, 2_000, 1_000), Ok(()));
        assert_eq!(l.len(), 1);
    }
}
