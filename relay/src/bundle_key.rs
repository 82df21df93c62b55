//! The relay's proof that it sent a bundle: a per-match key, derived from
//! the rejoin key, the match's number and its nonce, and the tag it puts on
//! every bundle it sends so that a restarted relay can tell the bundles its
//! players hand back from forged ones.
//!
//! Why a MAC and not a comparison of copies: a restarted relay lost the
//! turns it asks back, so it has nothing to compare with, and a turn held
//! by one player only has nothing else to be compared against. A keyed hash
//! only the relay can compute proves the bytes are the relay's, whoever
//! hands them back, so no player can put commands in another's name.

use crate::event::MatchId;
use crate::event::MatchNonce;
use lockstep::low_level::proto::{BUNDLE_TAG_LEN, Bundle, BundleTag};

/// The key of one match instance's bundle tags.
#[derive(Clone)]
pub(crate) struct BundleKey([u8; 32]);

impl BundleKey {
    /// The key of match `id` with instance nonce `nonce`, under the relay's
    /// rejoin key `rejoin_key`: the same in every process that shares the
    /// rejoin key (a persisted one), so a restarted relay checks the tags
    /// of the process that crashed; another match, another instance of the
    /// same number or another relay's key gives another key.
    pub(crate) fn derive(rejoin_key: &[u8; 32], id: MatchId, nonce: MatchNonce) -> Self {
        let mut material = [0u8; 32 + 8 + 16];
        let (key, rest) = material.split_at_mut(32);
        let (number, instance) = rest.split_at_mut(8);
        key.copy_from_slice(rejoin_key);
        number.copy_from_slice(&id.0.to_le_bytes());
        instance.copy_from_slice(&nonce.0);
        Self(blake3::derive_key(
            "lockstep relay bundle mac v1",
            &material,
        ))
    }

    /// The tag of a bundle whose message, encoded without a tag, is
    /// `untagged` ([`Bundle::untagged_bytes`]).
    fn tag_of(&self, untagged: &[u8]) -> BundleTag {
        let mut tag = [0u8; BUNDLE_TAG_LEN];
        tag.copy_from_slice(&blake3::keyed_hash(&self.0, untagged).as_bytes()[..BUNDLE_TAG_LEN]);
        BundleTag(tag)
    }

    /// Tags an encoded `ToPeer::Bundle` without a tag, in place: one keyed
    /// hash per closed turn, the bytes then shared by every recipient.
    pub(crate) fn seal(&self, bytes: &mut Vec<u8>) {
        let tag = self.tag_of(bytes);
        // Not a bundle without tag: left as it is, so it proves nothing.
        let _ = Bundle::set_encoded_tag(bytes, tag);
    }

    /// Whether `bundle` carries the tag this key gives its bytes: the relay
    /// sent it. Compared in constant time ([`BundleTag`]'s equality).
    pub(crate) fn proves(&self, bundle: &Bundle) -> bool {
        bundle
            .tag
            .is_some_and(|tag| tag == self.tag_of(&bundle.untagged_bytes()))
    }
}

impl std::fmt::Debug for BundleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A key does not belong in logs.
        f.write_str("BundleKey(..)")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;
    use lockstep::low_level::proto::ToPeer;
    use sim::{PlayerId, Turn};

    fn bundle() -> Bundle {
        Bundle {
            turn: Turn(7),
            inputs: vec![(PlayerId(0), vec![1, 2]), (PlayerId(1), vec![3])],
            notices: Vec::new(),
            tag: None,
        }
    }

    fn sealed(key: &BundleKey, b: &Bundle) -> Bundle {
        let mut bytes = ToPeer::Bundle(b.clone()).to_bytes();
        key.seal(&mut bytes);
        match ToPeer::decode(&bytes).unwrap() {
            ToPeer::Bundle(b) => b,
            other => panic!("{other:?}"),
        }
    }

    /// A sealed bundle proves itself; a changed input, turn or tag, no
    /// tag, or a tag of another match, instance or rejoin key does not.
    #[test]
    fn a_tag_proves_only_the_bytes_the_relay_sealed_for_that_match() {
        let (k, id, nonce) = ([3; 32], MatchId(1), MatchNonce([5; 16]));
        let key = BundleKey::derive(&k, id, nonce);
        let b = sealed(&key, &bundle());
        assert!(b.tag.is_some());
        assert!(key.proves(&b));
        let mut other_input = b.clone();
        other_input.inputs[1].0 = PlayerId(0);
        assert!(!key.proves(&other_input));
        let mut other_turn = b.clone();
        other_turn.turn = Turn(8);
        assert!(!key.proves(&other_turn));
        let mut flipped = b.clone();
        if let Some(t) = flipped.tag.as_mut() {
            t.0[15] ^= 1;
        }
        assert!(!key.proves(&flipped));
        assert!(!key.proves(&bundle()));
        for other in [
            BundleKey::derive(&k, id, MatchNonce([6; 16])),
            BundleKey::derive(&k, MatchId(2), nonce),
            BundleKey::derive(&[4; 32], id, nonce),
        ] {
            assert!(!other.proves(&b));
            assert!(!key.proves(&sealed(&other, &bundle())));
        }
    }
}
