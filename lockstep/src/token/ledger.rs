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

#[derive(Debug, Default)]
pub(crate) struct UsedTokens {
    by_id: BTreeMap<[u8; NONCE_LEN], (SocketAddr, u64)>,
    by_expiry: BTreeSet<(u64, [u8; NONCE_LEN])>,
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
