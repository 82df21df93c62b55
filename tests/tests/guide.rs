//! The README's guide, "Use it for your own game", run: its example game
//! (`tests/examples/own_game.rs`, written against the public API only)
//! plays a match through a real relay over loopback UDP with the guide's
//! glue, both peers agree, and the relay's recording verifies; its hashes
//! are snapshot-tested with insta; and the README's code is the example's.

#![allow(clippy::unwrap_used)] // tests may unwrap

// The example is a binary's code: here only part of it is used, and its
// public items are public for the reader, not for another crate.
#[allow(dead_code, unreachable_pub)]
#[path = "../examples/own_game.rs"]
mod own_game;

use own_game::{Paint, play, wanderer};
use sim::{MatchSetup, PlayerId, Simulation, Stamped, Turn};
use std::sync::atomic::{AtomicBool, Ordering};

/// The guide's "snapshot-test your hashes" step: a seeded 2-player match,
/// the state hash every 10 turns, pinned by insta.
#[test]
fn paint_hashes() {
    let setup = MatchSetup {
        seed: 42,
        players: 2,
        ticks_per_turn: 1,
    };
    let mut world = Paint::new(&setup);
    let mut table = String::new();
    for t in 0..50 {
        let inputs: Vec<Stamped<own_game::Command>> = (0..2)
            .flat_map(|p| {
                wanderer(&world, PlayerId(p))
                    .into_iter()
                    .map(move |command| Stamped {
                        player: PlayerId(p),
                        seq: 0,
                        command,
                    })
            })
            .collect();
        world.step(Turn(t), &inputs);
        if t % 10 == 9 {
            table.push_str(&format!("turn {t}: {}\n", world.state_hash().short()));
        }
    }
    insta::assert_snapshot!(table);
    let restored = Paint::restore(&world.snapshot()).unwrap();
    assert_eq!(restored.state_hash(), world.state_hash());
}

/// Two players of the developer's own game meet through a real relay
/// (`relay::udp::serve`, open mode, recording), play 40 turns with the
/// guide's glue, end with the same final hash, and the relay's recording
/// and a peer's own recording both verify as `Paint`.
#[test]
fn a_developers_own_game_plays_through_a_real_relay_and_its_replays_verify() {
    let dir = std::env::temp_dir().join(format!("guide-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let relay = socket.local_addr().unwrap();
    let recorder = relay::recorder::Recorder::new(&dir, relay::demo::known_rules_hash).unwrap();
    let stop = AtomicBool::new(false);
    let mine = dir.join("mine.lsr");
    let results = std::thread::scope(|scope| {
        let server = scope.spawn(|| {
            relay::udp::serve(
                &socket,
                relay::RelayConfig::default(),
                lockstep::low_level::transport::TransportConfig::default(),
                Some(recorder),
                &stop,
                |_| {},
            )
        });
        let players: Vec<_> = (0..2)
            .map(|i| {
                let mut builder = lockstep::peer::PeerBuilder::new("guide", 2).with_turns(40);
                if i == 0 {
                    builder = builder.with_record(&mine);
                }
                scope.spawn(move || play(relay, builder, wanderer))
            })
            .collect();
        let results: Vec<_> = players.into_iter().map(|p| p.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        results
    });
    let (turn, hash) = results[0].as_ref().unwrap().to_owned();
    assert_eq!(turn, Turn(39));
    assert_eq!(results[1].as_ref().unwrap(), &(turn, hash));
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    for f in &files {
        let reader = replays::Reader::open(f).unwrap();
        let report = replays::verify::<Paint, _>(reader, |_| {}).unwrap();
        assert!(report.verified() && report.clean(), "{f:?}: {report:?}");
        assert_eq!(report.final_hash, Some(hash), "{f:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
