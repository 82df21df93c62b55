//! The sizes `docs/reference.md` (rendered as [`crate::reference`]) states,
//! checked against the constants and encoders they describe, so the text
//! cannot drift from the code: each figure is looked up in the document as
//! written next to the value the code computes.

use crate::token::{
    MAX_SERVERS, PRIVATE_LEN, SEALED_LEN, SEALED_TOKEN_WIRE_LEN, TokenClaims, TokenKey, issue_token,
};
use crate::wire::{
    AuthKind, BULK_CHUNK, CHALLENGE_LEN, CONNECT_REQUEST_LEN, DENIED_LEN, FRAGMENT_SIZE, Header,
    MAX_FRAGMENTS, MAX_HEADER_LEN, MAX_PACKET, TAG_LEN, TOKEN_RESPONSE_LEN, encode_header,
};

const DOC: &str = include_str!("../docs/reference.md");

/// Panics naming the phrase if the reference does not contain it.
fn stated(phrase: &str) {
    assert!(
        DOC.contains(phrase),
        "docs/reference.md should say `{phrase}` (the code's figure)"
    );
}

#[test]
fn wire_sizes_in_the_reference_are_the_codes() {
    stated(&format!("every datagram ≤ {MAX_PACKET} bytes"));
    stated(&format!(
        "| always {CONNECT_REQUEST_LEN} (the largest packet) |"
    ));
    stated(&format!("cookie `[u8; 16]` | {CHALLENGE_LEN} |"));
    stated(&format!("sent to an open server) | {DENIED_LEN} |"));
    stated(&format!("| {CONNECT_REQUEST_LEN} / {TOKEN_RESPONSE_LEN} |"));
    stated(&format!(
        "ChallengeResponse body + sealed token again | {TOKEN_RESPONSE_LEN} |"
    ));
    stated(&format!("{TAG_LEN}-byte MAC"));
    stated(&format!("`index × {BULK_CHUNK} ..`"));
    stated(&format!("fixed {BULK_CHUNK}-byte fragments"));
    stated(&format!(
        "Messages over {FRAGMENT_SIZE} bytes are split into ≤ {MAX_FRAGMENTS} fragments"
    ));
    // The smallest header: a clean link (ack one behind seq, every ack bit set).
    let mut clean = Vec::new();
    encode_header(
        &Header {
            kind: AuthKind::Data,
            seq: 100,
            ack: 99,
            ack_bits: u32::MAX,
            ack_delay: 0,
        },
        &mut clean,
    );
    stated(&format!("header {}–{MAX_HEADER_LEN}", clean.len()));
    stated(&format!("A clean link sends a {}-byte header", clean.len()));
    // A full bulk packet is exactly the largest datagram.
    assert_eq!(
        MAX_HEADER_LEN + TAG_LEN + crate::wire::BULK_FRAME_OVERHEAD + BULK_CHUNK,
        MAX_PACKET
    );
}

#[test]
fn token_sizes_in_the_reference_are_the_codes() {
    let key = TokenKey::from_bytes([7; 32]);
    let claims = TokenClaims::new(0x1234, "ranked-42", 2, 1_700_000_000, 60);
    let v4 = "203.0.113.7:7777".parse().unwrap();
    let v6 = "[2001:db8::7]:7777".parse().unwrap();
    let len = |servers: &[std::net::SocketAddr]| {
        issue_token(&key, &claims, servers, &[9; 32])
            .unwrap()
            .to_bytes()
            .len()
    };
    let base = len(&[]);
    let per_v4 = len(&[v4]) - base;
    let per_v6 = len(&[v6]) - base;
    stated(&format!(
        "the sealed\ntoken on the wire is {SEALED_TOKEN_WIRE_LEN} bytes"
    ));
    stated(&format!(
        "{SEALED_LEN} sealed bytes ({PRIVATE_LEN} of private part"
    ));
    stated(&format!(
        "{base} bytes plus {per_v4} per IPv4 and {per_v6} per IPv6 address\n({} with one IPv4 relay)",
        base + per_v4
    ));
    stated(&format!("up to {MAX_SERVERS} relay addresses"));
    stated(&format!(
        "capped at {} remembered ids",
        crate::token::MAX_TRACKED_TOKENS
            .to_string()
            .as_bytes()
            .rchunks(3)
            .rev()
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect::<Vec<_>>()
            .join(" ")
    ));
}

/// The message section's version byte and the bundle tag's cost are the
/// code's: the tag's bytes measured on a real encoding.
#[test]
fn the_protocol_version_and_the_bundle_tag_in_the_reference_are_the_codes() {
    use crate::proto::{BUNDLE_TAG_LEN, Bundle, BundleTag, PROTOCOL_VERSION, ToPeer};
    stated(&format!("version byte {PROTOCOL_VERSION}, then postcard"));
    let bundle = Bundle {
        turn: sim::Turn(1),
        inputs: Vec::new(),
        notices: Vec::new(),
        tag: None,
    };
    let untagged = ToPeer::Bundle(bundle.clone()).to_bytes().len();
    let tagged = ToPeer::Bundle(Bundle {
        tag: Some(BundleTag([0; BUNDLE_TAG_LEN])),
        ..bundle
    })
    .to_bytes()
    .len();
    // Without a tag the bundle carries one byte saying so.
    stated(&format!(
        "1 byte without a tag, {} with one",
        tagged - untagged + 1
    ));
    stated(&format!("the first {BUNDLE_TAG_LEN} bytes of keyed BLAKE3"));
}

/// The match-size figures: players, the bundle budget and the largest
/// bundle at 32 players.
#[test]
fn match_size_figures_in_the_reference_are_the_codes() {
    use crate::proto::{
        MAX_BUNDLE_INPUT_BYTES, MAX_BUNDLE_LEN, MAX_MESSAGE_LEN, MAX_PLAYER_TURN_BYTES,
        player_turn_bytes,
    };
    stated(&format!("`sim::MAX_PLAYERS` = {}", sim::MAX_PLAYERS));
    stated(&format!("`MAX_MESSAGE_LEN` = {MAX_MESSAGE_LEN} bytes"));
    stated(&format!(
        "at most {MAX_FRAGMENTS} fragments of {FRAGMENT_SIZE}\nbytes"
    ));
    stated(&format!(
        "`MAX_BUNDLE_INPUT_BYTES` = {MAX_BUNDLE_INPUT_BYTES}"
    ));
    stated(&format!(
        "`MAX_PLAYER_TURN_BYTES` = {MAX_PLAYER_TURN_BYTES} up\nto 8 players"
    ));
    stated(&format!("{MAX_BUNDLE_INPUT_BYTES} / players beyond"));
    stated(&format!("({} bytes at 32 players", player_turn_bytes(32)));
    stated(&format!(
        "`MAX_BUNDLE_LEN` = {MAX_BUNDLE_LEN}\nbytes at any match size, {} fragments",
        MAX_BUNDLE_LEN.div_ceil(FRAGMENT_SIZE)
    ));
    stated(&format!(
        "version byte {}, then postcard",
        crate::proto::PROTOCOL_VERSION
    ));
}
