//! Determinism properties of the reference game (proptest): replaying the
//! same inputs gives the same hashes, arrival order within a turn does not
//! matter, snapshot/restore is invisible, and hostile commands never panic.

use proptest::prelude::*;
use sim::check::{SyncChecker, sync_test};
use sim::game::{Command, UnitKind, World};
use sim::{MatchSetup, PlayerId, Simulation, Stamped, Turn, scenarios};

/// Ids that hit real entities of a skirmish (about 0..60) most of the time,
/// and arbitrary ones otherwise.
fn unit_id() -> impl Strategy<Value = u32> + Clone {
    prop_oneof![4 => 0u32..64, 1 => any::<u32>()]
}

fn coord() -> impl Strategy<Value = u16> {
    prop_oneof![4 => 0u16..96, 1 => any::<u16>()]
}

fn kind() -> impl Strategy<Value = UnitKind> {
    prop::sample::select(UnitKind::ALL.to_vec())
}

/// Any command, valid or hostile.
fn command() -> impl Strategy<Value = Command> {
    let units = || prop::collection::vec(unit_id(), 0..12);
    prop_oneof![
        (units(), coord(), coord()).prop_map(|(units, x, y)| Command::Move { units, x, y }),
        (units(), coord(), coord()).prop_map(|(units, x, y)| Command::AttackMove { units, x, y }),
        (units(), unit_id()).prop_map(|(units, target)| Command::Attack { units, target }),
        units().prop_map(|units| Command::Stop { units }),
        (units(), unit_id()).prop_map(|(units, mine)| Command::Gather { units, mine }),
        (unit_id(), kind(), any::<u8>()).prop_map(|(base, kind, count)| Command::Train {
            base,
            kind,
            count
        }),
        (unit_id(), coord(), coord()).prop_map(|(worker, x, y)| Command::Build { worker, x, y }),
    ]
}

/// One turn's inputs, stamped for players 0..4 (a skirmish has 2: the rest are hostile).
fn turn_inputs() -> impl Strategy<Value = Vec<Stamped<Command>>> {
    prop::collection::vec((0u8..4, any::<u16>(), command()), 0..8).prop_map(|v| {
        v.into_iter()
            .map(|(p, seq, command)| Stamped {
                player: PlayerId(p),
                seq,
                command,
            })
            .collect()
    })
}

fn script() -> impl Strategy<Value = Vec<Vec<Stamped<Command>>>> {
    prop::collection::vec(turn_inputs(), 1..12)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn same_seed_and_inputs_give_same_hashes(seed in any::<u64>(), turns in script()) {
        let mut a = scenarios::skirmish(seed);
        let mut b = scenarios::skirmish(seed);
        prop_assert_eq!(a.state_hash(), b.state_hash());
        for (t, inputs) in turns.iter().enumerate() {
            let turn = Turn(u32::try_from(t).unwrap());
            a.step(turn, inputs);
            b.step(turn, inputs);
            prop_assert_eq!(a.state_hash(), b.state_hash());
            prop_assert_eq!(a.section_hashes(), b.section_hashes());
        }
    }

    #[test]
    fn arrival_order_within_a_turn_does_not_matter(
        seed in any::<u64>(),
        turns in script(),
        shuffle_seed in any::<u64>(),
    ) {
        let mut a = scenarios::skirmish(seed);
        let mut b = scenarios::skirmish(seed);
        let mut rng = sim::rng::Pcg32::new(shuffle_seed, 1);
        for (t, inputs) in turns.iter().enumerate() {
            let turn = Turn(u32::try_from(t).unwrap());
            let mut shuffled = inputs.clone();
            // Fisher-Yates with a seeded generator.
            for i in (1..shuffled.len()).rev() {
                let j = rng.below(u32::try_from(i + 1).unwrap()) as usize;
                shuffled.swap(i, j);
            }
            a.step(turn, inputs);
            b.step(turn, &shuffled);
            prop_assert_eq!(a.state_hash(), b.state_hash());
        }
    }

    #[test]
    fn snapshot_restore_continue_equals_continuing(
        seed in any::<u64>(),
        before in script(),
        after in script(),
    ) {
        let mut a = scenarios::skirmish(seed);
        let mut bots = scenarios::bots(&a, seed, 600);
        let mut t = 0u32;
        for inputs in &before {
            let mut inputs = inputs.clone();
            inputs.extend(scenarios::bot_inputs(&a, &mut bots, Turn(t)));
            a.step(Turn(t), &inputs);
            t += 1;
        }
        let mut b = World::restore(&a.snapshot()).unwrap();
        prop_assert_eq!(a.state_hash(), b.state_hash());
        for inputs in &after {
            a.step(Turn(t), inputs);
            b.step(Turn(t), inputs);
            prop_assert_eq!(a.state_hash(), b.state_hash());
            t += 1;
        }
        prop_assert_eq!(a.snapshot(), b.snapshot());
    }

    #[test]
    fn hostile_commands_never_panic(seed in any::<u64>(), turns in script(), junk in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut w = scenarios::skirmish(seed);
        for (t, inputs) in turns.iter().enumerate() {
            w.step(Turn(u32::try_from(t).unwrap()), inputs);
        }
        // Random bytes either decode into commands (then are applied) or are rejected.
        if let Ok(cmds) = sim::decode_commands::<Command>(PlayerId(1), &junk) {
            w.step(Turn(99), &cmds);
        }
        // Restoring garbage is an error, not a panic.
        prop_assert!(World::restore(&junk).is_err());
    }
}

#[test]
fn hostile_commands_are_ignored_and_counted() {
    let w = scenarios::skirmish(5);
    let mine_of_p0 = w
        .entities()
        .iter()
        .find(|e| e.owner == Some(PlayerId(0)) && e.kind == UnitKind::Soldier)
        .unwrap()
        .id;
    let base_of_p1 = w
        .entities()
        .iter()
        .find(|e| e.owner == Some(PlayerId(1)) && e.kind == UnitKind::Base)
        .unwrap()
        .id;
    let before = w.clone();
    let stamp = |player, command| Stamped {
        player: PlayerId(player),
        seq: 0,
        command,
    };
    let hostile = [
        // P1 moves P0's soldier.
        stamp(
            1,
            Command::Move {
                units: vec![mine_of_p0],
                x: 10,
                y: 10,
            },
        ),
        // Unknown ids.
        stamp(
            0,
            Command::Stop {
                units: vec![u32::MAX, 999_999],
            },
        ),
        // Out-of-map target.
        stamp(
            0,
            Command::Move {
                units: vec![mine_of_p0],
                x: u16::MAX,
                y: 3,
            },
        ),
        // Absurd count.
        stamp(
            1,
            Command::Train {
                base: base_of_p1,
                kind: UnitKind::Worker,
                count: 200,
            },
        ),
        // Training a base or a mine.
        stamp(
            1,
            Command::Train {
                base: base_of_p1,
                kind: UnitKind::Mine,
                count: 1,
            },
        ),
        // A player not in the match.
        stamp(
            7,
            Command::Stop {
                units: vec![mine_of_p0],
            },
        ),
        // Too many units in one command.
        stamp(
            0,
            Command::Stop {
                units: vec![mine_of_p0; 10_000],
            },
        ),
        // Attacking one's own unit.
        stamp(
            0,
            Command::Attack {
                units: vec![mine_of_p0],
                target: mine_of_p0,
            },
        ),
    ];
    let mut a = before.clone();
    a.step(Turn(0), &hostile);
    let mut b = before;
    b.step(Turn(0), &[]);
    assert_eq!(a.rejected_commands(), 8);
    // Apart from the counters, nothing changed: the soldier was not moved.
    assert_eq!(a.entities(), b.entities());
    assert_ne!(
        a.state_hash(),
        b.state_hash(),
        "the counters are part of the state"
    );
}

#[test]
fn sync_test_passes_on_a_bot_match_and_catches_hidden_state() {
    let mut w = scenarios::skirmish(9);
    let mut bots = scenarios::bots(&w, 9, 600);
    let mut probe = w.clone();
    let mut turns = Vec::new();
    for t in 0..40 {
        let inputs = scenarios::bot_inputs(&probe, &mut bots, Turn(t));
        probe.step(Turn(t), &inputs);
        turns.push((Turn(t), inputs));
    }
    let hashes = sync_test(&mut w, &turns, 6).unwrap();
    assert_eq!(hashes.len(), 40);
    assert_eq!(hashes[39], probe.state_hash());

    // A world whose snapshot drops part of its state must fail the check.
    #[derive(Clone)]
    struct Leaky(World, u32);
    impl Simulation for Leaky {
        type Command = Command;
        const GAME_ID: &'static str = "leaky";
        const GAME_VERSION: u32 = 0;
        fn new(setup: &MatchSetup) -> Self {
            Self(World::new(setup), 0)
        }
        fn rules_hash(&self) -> sim::StateHash {
            self.0.rules_hash()
        }
        fn step(&mut self, turn: Turn, inputs: &[Stamped<Command>]) {
            // Hidden state that is not in the snapshot changes the game.
            self.1 += 1;
            if self.1 == 5 {
                self.0.perturb(3);
            }
            self.0.step(turn, inputs);
        }
        fn state_hash(&self) -> sim::StateHash {
            self.0.state_hash()
        }
        fn section_hashes(&self) -> Vec<sim::SectionHash> {
            self.0.section_hashes()
        }
        fn snapshot(&self) -> Vec<u8> {
            self.0.snapshot()
        }
        fn restore(bytes: &[u8]) -> Result<Self, sim::SnapshotError> {
            // The counter is not in the snapshot: a restored world has lost it.
            Ok(Self(World::restore(bytes)?, 100))
        }
    }
    let mut leaky = Leaky(scenarios::skirmish(9), 0);
    let mut checker = SyncChecker::<Leaky>::new(8);
    for (turn, inputs) in &turns[..8] {
        checker.step(&mut leaky, *turn, inputs);
    }
    let err = checker.check().unwrap_err();
    match err {
        sim::check::SyncError::Mismatch { turn, sections, .. } => {
            assert_eq!(turn, Turn(4));
            assert!(
                sections.iter().any(|s| s.starts_with("entities")),
                "{sections:?}"
            );
        }
        other => panic!("unexpected {other}"),
    }
}
