//! The protocol's encoding, limits and validation.

use super::*;

/// `ENTERING_TAGS` are the tags `Join`, `Rejoin`, `Spectate`, `Reconnect`
/// and `Rewatch` encode to (a driver routes new connections by them), and
/// no other message's.
#[test]
fn entering_tags_are_the_tags_of_the_messages_that_enter_a_match() {
    let join = Join {
        match_name: "m".into(),
        slots: 2,
        game_id: "g".into(),
        game_version: 1,
        rules_hash: StateHash([0; 32]),
        name: "n".into(),
        turns: 0,
    };
    let entering = [
        ToRelay::Join(join.clone()),
        ToRelay::Rejoin(Rejoin {
            join: join.clone(),
            player: PlayerId(1),
            secret: RejoinSecret([7; 16]),
        }),
        ToRelay::Spectate(join.clone()),
        ToRelay::Reconnect(Reconnect {
            rejoin: Rejoin {
                join: join.clone(),
                player: PlayerId(1),
                secret: RejoinSecret([7; 16]),
            },
            from: Turn(40),
        }),
        ToRelay::Rewatch(Rewatch {
            join,
            from: Turn(30),
        }),
    ];
    assert_eq!(entering.len(), ToRelay::ENTERING_TAGS.len());
    for (m, tag) in entering.iter().zip(ToRelay::ENTERING_TAGS) {
        assert_eq!(m.to_bytes()[1], tag);
        assert_eq!(m.match_to_enter(), Some("m"));
    }
    let other = [
        ToRelay::Input {
            turn: Turn(0),
            commands: vec![],
        },
        ToRelay::Leave,
        ToRelay::CaughtUp { turn: Turn(1) },
    ];
    for m in other {
        assert!(!ToRelay::ENTERING_TAGS.contains(&m.to_bytes()[1]));
        assert_eq!(m.match_to_enter(), None);
    }
}

/// The largest bundle a match of `players` can be sent: every player at its
/// byte budget ([`player_turn_bytes`]) and entry budget, chunks long enough
/// for two-byte lengths where the budget allows, the longest turn number,
/// every notice slot used.
pub(crate) fn largest_bundle(players: u8) -> ToPeer {
    let budget = player_turn_bytes(players);
    // Every entry used, each chunk at least 128 bytes (a two-byte length)
    // while the budget allows, the rest of the entries empty.
    let long = (budget / 128).min(MAX_PLAYER_TURN_ENTRIES);
    let mut chunks = vec![budget / long; long];
    if let Some(last) = chunks.last_mut() {
        *last += budget % long;
    }
    chunks.resize(MAX_PLAYER_TURN_ENTRIES, 0);
    let inputs = (0..players)
        .flat_map(|p| chunks.iter().map(move |&n| (PlayerId(p), vec![0xAB; n])))
        .collect::<Vec<_>>();
    let notices = (0..MAX_NOTICES)
        .map(|i| Notice::PlayerDropped {
            player: PlayerId(u8::try_from(i).unwrap() % players),
            turn: Turn(u32::MAX),
        })
        .collect();
    ToPeer::Bundle(Bundle {
        turn: Turn(u32::MAX),
        inputs,
        notices,
        tag: Some(BundleTag([0xff; BUNDLE_TAG_LEN])),
    })
}

/// The budget arithmetic is right: the largest bundle the budgets allow
/// (every player at its byte and entry budget, the longest turn number,
/// every notice slot), at 8 players as at 32, encodes within
/// `MAX_BUNDLE_LEN`, which is under the message limit, and decodes.
#[test]
fn the_largest_bundle_the_budgets_allow_fits_its_bound() {
    assert_eq!(player_turn_bytes(8), MAX_PLAYER_TURN_BYTES);
    assert_eq!(player_turn_bytes(MAX_PLAYERS), 2048);
    for players in [1, 8, 9, 16, MAX_PLAYERS] {
        let b = largest_bundle(players);
        let ToPeer::Bundle(bundle) = &b else {
            unreachable!()
        };
        let bytes_in: usize = bundle.inputs.iter().map(|(_, c)| c.len()).sum();
        assert_eq!(
            bytes_in,
            usize::from(players) * player_turn_bytes(players),
            "{players} players"
        );
        let bytes = b.to_bytes();
        assert!(
            bytes.len() <= MAX_BUNDLE_LEN,
            "{players} players: {} > {MAX_BUNDLE_LEN}",
            bytes.len()
        );
        // Not `assert_eq!`: a failure would print 68 KB of bundle.
        assert!(ToPeer::decode(&bytes) == Ok(b), "{players} players");
    }
    // The bound is tight for the largest match (every entry used).
    let most = largest_bundle(MAX_PLAYERS).to_bytes().len();
    assert!(most + 1024 > MAX_BUNDLE_LEN, "the bound is loose: {most}");
}

/// Over the budget the decoder refuses: a bundle of 32 players each at 8 KiB
/// (what the eight-player budget would allow) carries more than
/// `MAX_BUNDLE_INPUT_BYTES`, and one player may still not pass
/// `MAX_PLAYER_TURN_BYTES`.
#[test]
fn a_bundle_over_the_shared_input_budget_does_not_decode() {
    let over = |inputs: Vec<(PlayerId, Vec<u8>)>| {
        let b = ToPeer::Bundle(Bundle {
            turn: Turn(3),
            inputs,
            notices: Vec::new(),
            tag: None,
        });
        ToPeer::decode(&b.to_bytes())
    };
    let each = |players: u8, bytes: usize| {
        (0..players)
            .flat_map(|p| (0..bytes / 2048).map(move |_| (PlayerId(p), vec![1; 2048])))
            .collect::<Vec<_>>()
    };
    assert!(over(each(8, MAX_PLAYER_TURN_BYTES)).is_ok());
    assert!(over(each(MAX_PLAYERS, 2048)).is_ok());
    assert_eq!(
        over(each(9, MAX_PLAYER_TURN_BYTES)),
        Err(DecodeError::Bounds("bundle input bytes"))
    );
    assert_eq!(
        over(each(1, MAX_PLAYER_TURN_BYTES + 2048)),
        Err(DecodeError::Bounds("player bytes in bundle"))
    );
}

/// The relay tags a closed turn's bytes in place, once for every
/// recipient: tagging the untagged encoding gives exactly the encoding of
/// the tagged bundle, the bytes a tag covers leave out the tag a bundle
/// holds (so a handed-back bundle is checked on the bytes the relay
/// tagged), and bytes that are not an untagged bundle are left alone.
#[test]
fn a_bundle_is_tagged_in_place_over_its_untagged_encoding() {
    let tag = BundleTag([0x5a; BUNDLE_TAG_LEN]);
    let untagged = Bundle {
        turn: Turn(300),
        inputs: vec![(PlayerId(1), vec![9, 9])],
        notices: vec![Notice::PlayerRejoined {
            player: PlayerId(0),
            turn: Turn(300),
        }],
        tag: None,
    };
    let tagged = Bundle {
        tag: Some(tag),
        ..untagged.clone()
    };
    let mut bytes = ToPeer::Bundle(untagged.clone()).to_bytes();
    assert_eq!(tagged.untagged_bytes(), bytes);
    assert_eq!(untagged.untagged_bytes(), bytes);
    assert!(Bundle::set_encoded_tag(&mut bytes, tag));
    assert_eq!(bytes, ToPeer::Bundle(tagged.clone()).to_bytes());
    assert_eq!(
        bytes.len(),
        untagged.untagged_bytes().len() + BUNDLE_TAG_LEN
    );
    assert_eq!(ToPeer::decode(&bytes), Ok(ToPeer::Bundle(tagged)));
    // Already tagged, another message, nothing at all: unchanged.
    let before = bytes.clone();
    assert!(!Bundle::set_encoded_tag(&mut bytes, tag));
    assert_eq!(bytes, before);
    for mut other in [
        ToPeer::HandBack { from: Turn(0) }.to_bytes(),
        ToPeer::Ping { stamp_us: 0 }.to_bytes(),
        Vec::new(),
    ] {
        let before = other.clone();
        assert!(!Bundle::set_encoded_tag(&mut other, tag));
        assert_eq!(other, before);
    }
}

fn samples() -> (Vec<ToRelay>, Vec<ToPeer>) {
    let h = StateHash([7; 32]);
    let to_relay = vec![
        ToRelay::Join(Join {
            match_name: "m".into(),
            slots: 4,
            game_id: "rts".into(),
            game_version: 3,
            rules_hash: h,
            name: "bob".into(),
            turns: 300,
        }),
        ToRelay::Input {
            turn: Turn(5),
            commands: vec![vec![1, 2, 3], vec![]],
        },
        ToRelay::Hash {
            turn: Turn(9),
            hash: h,
        },
        ToRelay::Sections {
            turn: Turn(9),
            sections: vec![SectionHash {
                name: "units 0..64".into(),
                hash: h,
            }],
        },
        ToRelay::Pong { stamp_us: 77 },
        ToRelay::Report(PeerReport {
            rtt_us: 1,
            jitter_us: 2,
            loss_permille: 3,
            stall_us: 4,
            executed: Some(Turn(3)),
        }),
        ToRelay::Leave,
    ];
    let to_peer = vec![
        ToPeer::Lobby {
            match_name: "m".into(),
            joined: 1,
            slots: 2,
        },
        ToPeer::Rejected {
            reason: RejectReason::RelayFull,
            detail: Some("64 matches".into()),
        },
        ToPeer::Start(Start {
            your_player: PlayerId(1),
            setup: MatchSetup {
                seed: 9,
                players: 2,
                ticks_per_turn: 4,
            },
            turn_length_us: 100_000,
            players: vec![
                PlayerInfo {
                    id: PlayerId(0),
                    name: "a".into(),
                },
                PlayerInfo {
                    id: PlayerId(1),
                    name: "b".into(),
                },
            ],
            input_delay: 3,
            first_turn: Turn(0),
            last_turn: Some(Turn(99)),
        }),
        ToPeer::Bundle(Bundle {
            turn: Turn(4),
            inputs: vec![(PlayerId(0), vec![1]), (PlayerId(1), vec![2, 3])],
            notices: vec![
                Notice::PlayerDropped {
                    player: PlayerId(1),
                    turn: Turn(4),
                },
                Notice::DelayChange {
                    delay: 5,
                    from_turn: Turn(5),
                },
            ],
            tag: Some(BundleTag([7; 16])),
        }),
        ToPeer::Desync(DesyncReport {
            turn: Turn(3),
            hashes: vec![(PlayerId(0), h)],
            odd_players: vec![PlayerId(0)],
        }),
        ToPeer::SectionRequest { turn: Turn(3) },
        ToPeer::SectionDiff {
            turn: Turn(3),
            players: vec![PlayerId(0), PlayerId(1)],
            sections: vec!["units".into()],
        },
        ToPeer::LateInput {
            turn: Turn(3),
            landed_in: Turn(6),
        },
        ToPeer::InputRefused { turn: Turn(4) },
        ToPeer::Waiting {
            turn: Turn(3),
            players: vec![PlayerId(2)],
        },
        ToPeer::Ping { stamp_us: 5 },
        ToPeer::MatchEnd {
            turn: Some(Turn(99)),
            reason: EndReason::Completed,
        },
        ToPeer::MatchEnd {
            turn: None,
            reason: EndReason::Shutdown,
        },
        ToPeer::DesyncDetails(DesyncDetails {
            turn: Turn(3),
            complete: true,
            entities: vec![DesyncEntity {
                section: "ships".into(),
                id: 2,
                odd_player: PlayerId(2),
                majority_player: PlayerId(0),
                fields: vec![DesyncField {
                    path: "hp".into(),
                    majority: Some("90".into()),
                    odd: None,
                }],
            }],
        }),
    ];
    (to_relay, to_peer)
}

#[test]
fn every_message_round_trips() {
    let (a, b) = samples();
    for m in a {
        assert_eq!(ToRelay::decode(&m.to_bytes()).unwrap(), m);
    }
    for m in b {
        assert_eq!(ToPeer::decode(&m.to_bytes()).unwrap(), m);
    }
}

#[test]
fn rejects_version_trailing_and_bounds() {
    let mut bytes = ToRelay::Leave.to_bytes();
    bytes[0] = 9;
    assert_eq!(
        ToRelay::decode(&bytes),
        Err(DecodeError::Version { got: 9 })
    );
    let mut bytes = ToRelay::Leave.to_bytes();
    bytes.push(0);
    assert_eq!(ToRelay::decode(&bytes), Err(DecodeError::Trailing(1)));
    assert_eq!(ToRelay::decode(&[]), Err(DecodeError::Empty));
    let big = ToRelay::Input {
        turn: Turn(1),
        commands: vec![vec![0; 10]; MAX_INPUT_CHUNKS + 1],
    };
    assert_eq!(
        ToRelay::decode(&big.to_bytes()),
        Err(DecodeError::Bounds("input chunks"))
    );
    let huge = vec![PROTOCOL_VERSION; MAX_MESSAGE_LEN + 1];
    assert!(matches!(
        ToPeer::decode(&huge),
        Err(DecodeError::TooLong(_))
    ));
}

/// Seeded random and mutated bytes never panic the decoders.
#[test]
fn random_bytes_never_panic() {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (a, b) = samples();
    let valid: Vec<Vec<u8>> = a
        .iter()
        .map(ToRelay::to_bytes)
        .chain(b.iter().map(ToPeer::to_bytes))
        .collect();
    for i in 0..20_000u32 {
        let mut bytes = if i % 2 == 0 {
            let len = (next() % 200) as usize;
            let mut v: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if let Some(first) = v.first_mut() {
                *first = PROTOCOL_VERSION;
            }
            v
        } else {
            valid[(next() % valid.len() as u64) as usize].clone()
        };
        if !bytes.is_empty() {
            for _ in 0..(next() % 4) {
                let at = (next() % bytes.len() as u64) as usize;
                bytes[at] = next() as u8;
            }
            if next() % 3 == 0 {
                bytes.truncate((next() % bytes.len() as u64) as usize);
            }
        }
        let _ = ToRelay::decode(&bytes);
        let _ = ToPeer::decode(&bytes);
    }
}

#[test]
fn decode_turn_decodes_each_entry_then_orders() {
    let mut a = Vec::new();
    sim::encode_commands(&[10u32, 11], &mut a);
    let mut b = Vec::new();
    sim::encode_commands(&[12u32], &mut b);
    let inputs = vec![
        (PlayerId(1), a.clone()),
        (PlayerId(0), b.clone()),
        (PlayerId(1), b),
        (PlayerId(0), vec![0xff, 0xff]),
    ];
    let out = decode_turn::<u32>(&inputs);
    let got: Vec<(u8, u16, u32)> = out.iter().map(|s| (s.player.0, s.seq, s.command)).collect();
    // Player 1's two entries tie at seq 0: ordered by entry bytes, not arrival.
    assert_eq!(got, vec![(0, 0, 12), (1, 0, 12), (1, 0, 10), (1, 1, 11)]);
}

/// The desync details message is appended to `ToPeer`: every older message
/// keeps its tag (the last older one, `Reoffer`, is 19) and the new one is
/// the next; details at every cap, with the longest strings, fit its bound
/// and decode, and one entity over the cap is refused.
#[test]
fn desync_details_are_appended_and_bounded() {
    let reoffer = ToPeer::Reoffer(Reoffer {
        snapshot: None,
        live: Turn(1),
    });
    let details = |entities: usize| {
        let long = |n: usize| "é".repeat(n); // two bytes a char: cut on boundaries
        DesyncDetails {
            turn: Turn(u32::MAX),
            complete: false,
            entities: (0..entities)
                .map(|i| DesyncEntity {
                    section: long(100),
                    id: u64::MAX - i as u64,
                    odd_player: PlayerId(7),
                    majority_player: PlayerId(6),
                    fields: (0..40)
                        .map(|_| DesyncField {
                            path: long(100),
                            majority: Some(long(200)),
                            odd: Some(long(200)),
                        })
                        .collect(),
                })
                .collect(),
        }
    };
    let tag = |m: &ToPeer| m.to_bytes()[1];
    assert_eq!(tag(&reoffer), 19);
    let full = ToPeer::DesyncDetails(details(40).bounded());
    assert_eq!(tag(&full), 20);
    let bytes = full.to_bytes();
    assert!(bytes.len() <= MAX_DETAILS_LEN, "{} bytes", bytes.len());
    assert_eq!(ToPeer::decode(&bytes).unwrap(), full);
    let mut over = details(MAX_DETAIL_ENTITIES).bounded();
    over.entities.push(over.entities[0].clone());
    assert_eq!(
        ToPeer::decode(&ToPeer::DesyncDetails(over).to_bytes()),
        Err(DecodeError::Bounds("detail entities"))
    );
}
