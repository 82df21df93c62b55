//! Token sealing, opening and encoding tests.

use super::*;

fn key() -> TokenKey {
    TokenKey::from_bytes([0x11; KEY_LEN])
}

fn claims() -> TokenClaims {
    TokenClaims::new(0x4C4F_434B_5354_4550, "ranked-42", 3, 1_700_000_000, 60)
}

fn servers() -> Vec<SocketAddr> {
    vec![
        "203.0.113.7:7777".parse().unwrap(),
        "[2001:db8::1]:7777".parse().unwrap(),
    ]
}

#[test]
fn issued_token_opens_with_its_claims_and_keys() {
    let t = issue_token(&key(), &claims(), &servers(), &[5; 32]).unwrap();
    let (c, keys) = t.private.open(&key()).unwrap();
    assert_eq!(c, claims());
    assert_eq!(c.expire_unix, 1_700_000_060);
    assert_eq!(keys, t.keys);
    assert_ne!(keys.c2s, keys.s2c);
    // The keys are not visible in the sealed bytes.
    let sealed = t.private.sealed;
    assert!(
        !sealed
            .windows(KEY_LEN)
            .any(|w| w == keys.c2s || w == keys.s2c)
    );
    assert!(!sealed.windows(9).any(|w| w == b"ranked-42"));
}

#[test]
fn fresh_entropy_gives_fresh_nonce_and_keys_and_same_entropy_differs_by_claims() {
    let a = issue_token(&key(), &claims(), &[], &[1; 32]).unwrap();
    let b = issue_token(&key(), &claims(), &[], &[2; 32]).unwrap();
    assert_ne!(a.private.nonce, b.private.nonce);
    assert_ne!(a.keys, b.keys);
    let mut other = claims();
    other.slot = 4;
    let c = issue_token(&key(), &other, &[], &[1; 32]).unwrap();
    assert_ne!(
        a.private.nonce, c.private.nonce,
        "nonce never repeats across claims"
    );
    assert_ne!(a.keys, c.keys);
    // Same entropy under another key: nothing in common either.
    let d = issue_token(&TokenKey::from_bytes([0x22; 32]), &claims(), &[], &[1; 32]).unwrap();
    assert_ne!(a.keys, d.keys);
}

#[test]
fn every_bit_flip_and_wrong_key_is_forged() {
    let t = issue_token(&key(), &claims(), &servers(), &[9; 32]).unwrap();
    assert_eq!(
        t.private.open(&TokenKey::from_bytes([0x12; 32])),
        Err(TokenError::Forged)
    );
    for byte in 0..SEALED_LEN {
        let mut f = t.private;
        f.sealed[byte] ^= 1 << (byte % 8);
        assert_eq!(
            f.open(&key()),
            Err(TokenError::Forged),
            "sealed byte {byte}"
        );
    }
    for byte in 0..NONCE_LEN {
        let mut f = t.private;
        f.nonce[byte] ^= 0x80;
        assert_eq!(f.open(&key()), Err(TokenError::Forged), "nonce byte {byte}");
    }
    // The clear fields are authenticated: a longer life or another protocol does not open.
    let mut f = t.private;
    f.expire_unix += 3600;
    assert_eq!(f.open(&key()), Err(TokenError::Forged));
    let mut f = t.private;
    f.create_unix -= 1;
    assert_eq!(f.open(&key()), Err(TokenError::Forged));
    let mut f = t.private;
    f.protocol_id ^= 1;
    assert_eq!(f.open(&key()), Err(TokenError::Forged));
}

#[test]
fn issue_rejects_bad_inputs() {
    let mut c = claims();
    c.match_name = "x".repeat(MAX_MATCH_NAME + 1);
    assert_eq!(
        issue_token(&key(), &c, &[], &[0; 32]),
        Err(TokenError::MatchNameTooLong { len: 65 })
    );
    c.match_name = "é".repeat(MAX_MATCH_NAME / 2);
    let t = issue_token(&key(), &c, &[], &[0; 32]).unwrap();
    assert_eq!(t.private.open(&key()).unwrap().0.match_name, c.match_name);
    let mut c = claims();
    c.expire_unix = c.create_unix;
    assert!(matches!(
        issue_token(&key(), &c, &[], &[0; 32]),
        Err(TokenError::BadLifetime { .. })
    ));
    let many = vec![servers()[0]; MAX_SERVERS + 1];
    assert_eq!(
        issue_token(&key(), &claims(), &many, &[0; 32]),
        Err(TokenError::TooManyServers { count: 9 })
    );
}

#[test]
fn public_token_round_trips_as_bytes_and_hex() {
    let t = issue_token(&key(), &claims(), &servers(), &[3; 32]).unwrap();
    let bytes = t.to_bytes();
    assert_eq!(
        bytes.len(),
        4 + 1 + 8 + SEALED_TOKEN_WIRE_LEN + 2 * KEY_LEN + 1 + (1 + 4 + 2) + (1 + 16 + 2)
    );
    assert_eq!(ConnectToken::decode(&bytes).unwrap(), t);
    let hex = t.to_hex();
    assert_eq!(hex.len(), bytes.len() * 2);
    assert_eq!(
        ConnectToken::from_hex(&format!("  {}\n", hex.to_uppercase())).unwrap(),
        t
    );
    assert_eq!(t.expire_unix(), 1_700_000_060);
    assert!(TokenKey::from_hex(&key().to_hex()).unwrap() == key());
    assert_eq!(format!("{:?}", key()), "TokenKey(..)");
}

#[test]
fn public_token_decoder_never_panics_and_rejects_damage() {
    let t = issue_token(&key(), &claims(), &servers(), &[3; 32]).unwrap();
    let bytes = t.to_bytes();
    for len in 0..bytes.len() {
        assert!(
            ConnectToken::decode(&bytes[..len]).is_err(),
            "prefix of {len}"
        );
    }
    let mut long = bytes.clone();
    long.push(0);
    assert!(ConnectToken::decode(&long).is_err());
    let mut rng = crate::rng::Rng::new(4);
    for _ in 0..2000 {
        let mut m = bytes.clone();
        let i = (rng.next_u64() as usize) % m.len();
        m[i] = rng.next_u64() as u8;
        if let Ok(d) = ConnectToken::decode(&m) {
            assert_eq!(d.to_bytes(), m, "accepted bytes re-encode identically");
        }
    }
    assert!(matches!(
        ConnectToken::from_hex("abc"),
        Err(TokenError::Hex(_))
    ));
    assert!(matches!(
        ConnectToken::from_hex("zz"),
        Err(TokenError::Hex(_))
    ));
    assert!(TokenKey::from_hex("00").is_err());
}

#[test]
fn admits_checks_match_then_slot() {
    let c = claims();
    assert_eq!(c.admits("ranked-42", 3), Ok(()));
    assert_eq!(c.admits("ranked-43", 3), Err(Refusal::WrongMatch));
    assert_eq!(c.admits("ranked-42", 2), Err(Refusal::WrongSlot));
    assert!(!c.is_expired(1_700_000_059));
    assert!(c.is_expired(1_700_000_060));
}

#[test]
fn a_spectator_token_seals_its_kind_watches_its_match_and_never_plays() {
    let c = TokenClaims::spectator(0x4C4F_434B_5354_4550, "ranked-42", 1_700_000_000, 60);
    let t = issue_token(&key(), &c, &servers(), &[7; 32]).unwrap();
    let back = ConnectToken::from_hex(&t.to_hex()).unwrap();
    let (opened, _) = back.private.open(&key()).unwrap();
    assert_eq!(opened.kind, TokenKind::Spectator);
    assert_eq!(opened, c);
    assert_eq!(opened.admits_spectator("ranked-42"), Ok(()));
    assert_eq!(
        opened.admits_spectator("ranked-43"),
        Err(Refusal::WrongMatch)
    );
    // Whatever slot it names, a spectator token admits no player.
    for slot in [0, 1, 3] {
        assert_eq!(opened.admits("ranked-42", slot), Err(Refusal::WrongKind));
    }
    // And a player token does not admit a spectator.
    assert_eq!(
        claims().admits_spectator("ranked-42"),
        Err(Refusal::WrongKind)
    );
    // A player token of the same match, slot and times differs in its id
    // and keys: the kind is part of what the nonce and keys derive from.
    let mut player = c.clone();
    player.kind = TokenKind::Player;
    let p = issue_token(&key(), &player, &servers(), &[7; 32]).unwrap();
    assert_ne!(p.private.nonce, t.private.nonce);
    assert_ne!(p.keys, t.keys);
}

/// An all-zero token key is a placeholder: anyone could issue tokens under
/// it. Keys read from text or bytes refuse it, as the rejoin key does.
#[test]
fn an_all_zero_token_key_is_refused() {
    assert_eq!(
        TokenKey::try_from_bytes([0; 32]).map(|_| ()),
        Err(TokenError::ZeroKey)
    );
    assert_eq!(
        TokenKey::from_hex(&"0".repeat(64)).map(|_| ()),
        Err(TokenError::ZeroKey)
    );
    let mut one = [0; 32];
    one[31] = 1;
    assert!(TokenKey::try_from_bytes(one).is_ok());
}

/// The match instance is sealed with the rest (version 3): the relay reads
/// back the instance the matchmaker set, and two matches' tokens of one
/// name, slot and times differ in it, in their id and in their keys.
#[test]
fn the_match_instance_is_sealed_and_read_back() {
    let instance = MatchInstance([0x5A; INSTANCE_LEN]);
    let c = claims().with_instance(instance);
    let t = issue_token(&key(), &c, &servers(), &[7; 32]).unwrap();
    let back = ConnectToken::from_hex(&t.to_hex()).unwrap();
    let (opened, _) = back.private.open(&key()).unwrap();
    assert_eq!(opened.instance, instance);
    assert_eq!(opened, c);
    let unbound = issue_token(&key(), &claims(), &servers(), &[7; 32]).unwrap();
    let (opened, _) = unbound.private.open(&key()).unwrap();
    assert_eq!(opened.instance, MatchInstance::UNBOUND);
    assert_ne!(unbound.private.nonce, t.private.nonce);
    assert_ne!(unbound.keys, t.keys);
    // Its text form, as `relay token --instance` takes it.
    assert_eq!(MatchInstance::from_hex(&instance.to_hex()), Ok(instance));
    assert!(MatchInstance::from_hex("5a5a").is_err());
}
