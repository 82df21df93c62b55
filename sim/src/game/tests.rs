//! Behaviour tests of the reference game: movement, combat, economy,
//! training, building, victory, fault injection and snapshot validation.

use super::*;
use crate::contract::{MatchSetup, PlayerId, Simulation, Stamped, Turn};
use crate::num::{Vec2, fx_int};

fn open_world() -> World {
    let setup = MatchSetup {
        seed: 1,
        players: 2,
        ticks_per_turn: DEFAULT_TICKS_PER_TURN,
    };
    let config = MapConfig {
        width: 48,
        height: 48,
        obstacles: 0,
        mines_per_base: 1,
        center_mines: 0,
        start_workers: 0,
        start_soldiers: 0,
        start_archers: 0,
    };
    World::generate(&setup, &config)
}

fn cmd(player: u8, command: Command) -> Vec<Stamped<Command>> {
    vec![Stamped {
        player: PlayerId(player),
        seq: 0,
        command,
    }]
}

fn run(w: &mut World, turns: u32) {
    let start = w.last_turn().map_or(0, |t| t.0 + 1);
    for t in start..start + turns {
        w.step(Turn(t), &[]);
    }
}

fn first(w: &World, player: u8, kind: UnitKind) -> u32 {
    w.entities()
        .iter()
        .find(|e| e.owner == Some(PlayerId(player)) && e.kind == kind)
        .map(|e| e.id)
        .unwrap()
}

#[test]
fn move_walks_into_formation_and_stops() {
    let mut w = open_world();
    let a = w.spawn_at(Some(PlayerId(0)), UnitKind::Soldier, (20, 20));
    let b = w.spawn_at(Some(PlayerId(0)), UnitKind::Soldier, (20, 21));
    w.step(
        Turn(0),
        &cmd(
            0,
            Command::Move {
                units: vec![a, b],
                x: 30,
                y: 24,
            },
        ),
    );
    run(&mut w, 120);
    let (ea, eb) = (w.entity(a).unwrap(), w.entity(b).unwrap());
    assert_eq!(ea.order, Order::Idle);
    assert_eq!(eb.order, Order::Idle);
    let dest = Vec2::tile_center(30, 24);
    assert!(ea.pos.distance(dest) < fx_int(2), "{:?}", ea.pos);
    assert!(eb.pos.distance(dest) < fx_int(2), "{:?}", eb.pos);
    // Separation keeps them apart.
    assert!(ea.pos.distance(eb.pos) > fx_int(1) / 2);
}

#[test]
fn soldiers_fight_until_one_dies() {
    let mut w = open_world();
    let a = w.spawn_at(Some(PlayerId(0)), UnitKind::Soldier, (20, 20));
    let b = w.spawn_at(Some(PlayerId(1)), UnitKind::Worker, (22, 20));
    w.step(
        Turn(0),
        &cmd(
            0,
            Command::Attack {
                units: vec![a],
                target: b,
            },
        ),
    );
    run(&mut w, 60);
    assert!(w.entity(b).is_none(), "the worker died");
    assert_eq!(w.player(PlayerId(1)).unwrap().lost, 1);
    assert_eq!(w.entity(a).unwrap().order, Order::Idle);
}

#[test]
fn idle_army_engages_enemies_in_sight() {
    let mut w = open_world();
    let a = w.spawn_at(Some(PlayerId(0)), UnitKind::Archer, (20, 20));
    let b = w.spawn_at(Some(PlayerId(1)), UnitKind::Worker, (24, 20));
    run(&mut w, 40);
    assert!(
        w.entity(b)
            .is_none_or(|e| e.hp < UnitKind::Worker.stats().hp)
    );
    assert!(w.entity(a).is_some());
}

#[test]
fn workers_gather_and_training_costs_resources() {
    let mut w = open_world();
    let base = first(&w, 0, UnitKind::Base);
    let mine = w
        .entities()
        .iter()
        .find(|e| e.kind == UnitKind::Mine)
        .unwrap()
        .id;
    let start = w.player(PlayerId(0)).unwrap().resources;
    w.step(
        Turn(0),
        &cmd(
            0,
            Command::Train {
                base,
                kind: UnitKind::Worker,
                count: 2,
            },
        ),
    );
    assert_eq!(
        w.player(PlayerId(0)).unwrap().resources,
        start - 2 * UnitKind::Worker.stats().cost
    );
    run(&mut w, 45);
    let workers: Vec<u32> = w
        .entities()
        .iter()
        .filter(|e| e.owner == Some(PlayerId(0)) && e.kind == UnitKind::Worker)
        .map(|e| e.id)
        .collect();
    assert_eq!(workers.len(), 2, "both workers trained");
    let before = w.player(PlayerId(0)).unwrap().resources;
    w.step(
        Turn(46),
        &cmd(
            0,
            Command::Gather {
                units: workers,
                mine,
            },
        ),
    );
    run(&mut w, 200);
    assert!(w.player(PlayerId(0)).unwrap().resources > before + 3 * CARRY);
    assert!(w.entity(mine).unwrap().cargo < MINE_AMOUNT);
}

#[test]
fn build_spends_resources_and_adds_a_base() {
    let mut w = open_world();
    let worker = w.spawn_at(Some(PlayerId(0)), UnitKind::Worker, (20, 24));
    w.s.players[0].resources = 1000;
    w.step(
        Turn(0),
        &cmd(
            0,
            Command::Build {
                worker,
                x: 24,
                y: 24,
            },
        ),
    );
    run(&mut w, 60);
    let bases = w
        .entities()
        .iter()
        .filter(|e| e.owner == Some(PlayerId(0)) && e.kind == UnitKind::Base)
        .count();
    assert_eq!(bases, 2);
    assert_eq!(w.player(PlayerId(0)).unwrap().resources, 600);
}

#[test]
fn last_player_with_a_base_wins() {
    let mut w = open_world();
    let enemy_base = first(&w, 1, UnitKind::Base);
    let army: Vec<u32> = (0..12)
        .map(|k| {
            w.spawn_at(
                Some(PlayerId(0)),
                UnitKind::Soldier,
                (30 + k % 4, 30 + k / 4),
            )
        })
        .collect();
    w.step(
        Turn(0),
        &cmd(
            0,
            Command::Attack {
                units: army,
                target: enemy_base,
            },
        ),
    );
    run(&mut w, 400);
    assert_eq!(w.winner(), Some(PlayerId(0)));
    assert!(!w.player(PlayerId(1)).unwrap().alive);
    let text = w.summary().to_string();
    assert!(text.contains("winner: P0"), "{text}");
}

#[test]
fn perturb_changes_exactly_one_entity_section() {
    let w = crate::scenarios::melee(3000, 4);
    let mut p = w.clone();
    p.perturb(2500);
    assert_ne!(w.state_hash(), p.state_hash());
    let diff = crate::hash::diff_sections(&w.section_hashes(), &p.section_hashes());
    assert_eq!(diff, vec!["entities 2048..3072".to_owned()]);
}

/// Forensics names exactly the entity and field `perturb` changed, with
/// both values, and every section's entity list checks against its hash.
#[test]
fn forensics_names_the_perturbed_entity_and_field() {
    let w = crate::scenarios::melee(3000, 4);
    assert!(crate::forensics::sections_are_consistent(&w));
    let (section, id, field) = w.perturb_target(2500).unwrap();
    let mut p = w.clone();
    p.perturb(2500);
    assert!(crate::forensics::sections_are_consistent(&p));
    let diff = crate::forensics::narrow(&w, &p, 8);
    assert_eq!(diff.len(), 1, "{diff:?}");
    assert_eq!(
        (diff[0].section.as_str(), diff[0].id),
        (section.as_str(), id)
    );
    let e = w.s.entities.iter().find(|e| u64::from(e.id) == id).unwrap();
    assert_eq!(
        diff[0].fields,
        vec![crate::forensics::FieldDiff {
            path: field.into(),
            a: Some(e.hp.to_string()),
            b: Some((e.hp - 1).to_string()),
        }]
    );
    // The globals are one entity with named fields.
    let g = w.entity_fields("globals", 0).unwrap();
    assert!(g.iter().any(|f| f.path == "players[1].resources"), "{g:?}");
    assert_eq!(w.entity_hashes("entities 99..7"), vec![]);
}

#[test]
fn corrupt_snapshots_are_errors() {
    let w = crate::scenarios::skirmish(2);
    let bytes = w.snapshot();
    assert!(World::restore(&bytes).is_ok());
    assert!(World::restore(&bytes[..bytes.len() / 2]).is_err());
    assert!(World::restore(b"nope").is_err());
    let mut extra = bytes.clone();
    extra.push(0);
    assert!(World::restore(&extra).is_err());
    // An entity moved outside the map is caught by validation.
    let mut bad = w.clone();
    bad.s.entities[0].pos = Vec2::new(fx_int(5000), fx_int(1));
    assert!(matches!(
        World::restore(&bad.snapshot()),
        Err(crate::SnapshotError::Invalid(_))
    ));
}

#[test]
fn hostile_setup_is_clamped() {
    let w = World::new(&MatchSetup {
        seed: 0,
        players: 200,
        ticks_per_turn: 0,
    });
    assert_eq!(w.players().len(), usize::from(crate::MAX_PLAYERS));
    assert_eq!(w.setup().ticks_per_turn, 1);
}

#[test]
fn path_commands_per_turn_are_capped() {
    let mut w = open_world();
    let a = w.spawn_at(Some(PlayerId(0)), UnitKind::Soldier, (20, 20));
    let cmds: Vec<Stamped<Command>> = (0..6u16)
        .map(|k| Stamped {
            player: PlayerId(0),
            seq: k,
            command: Command::Move {
                units: vec![a],
                x: 10 + k,
                y: 10,
            },
        })
        .collect();
    w.step(Turn(0), &cmds);
    assert_eq!(
        w.rejected_commands() as usize,
        6 - MAX_PATH_COMMANDS_PER_TURN
    );
    // The last accepted one wins: seq 3, tile (13, 10).
    assert!(matches!(
        w.entity(a).unwrap().order,
        Order::Move { dest: (13, 10), .. }
    ));
}

/// A match of 32 players has 32 bases, one each, at least an eighth of
/// the (larger) map apart; the first eight stand where the eight-player
/// table put them (over 8 of the side, on the 128-tile map of 8 players).
#[test]
fn thirty_two_players_get_bases_far_apart_and_the_first_eight_keep_theirs() {
    let bases = |players: u8| {
        let w = World::new(&MatchSetup {
            seed: 5,
            players,
            ticks_per_turn: DEFAULT_TICKS_PER_TURN,
        });
        let mut b: Vec<(u8, Vec2)> = w
            .entities()
            .iter()
            .filter(|e| e.kind == UnitKind::Base)
            .filter_map(|e| Some((e.owner?.0, e.pos)))
            .collect();
        b.sort_by_key(|&(p, _)| p);
        (w.s.map.width(), b)
    };
    let (side, all) = bases(crate::MAX_PLAYERS);
    assert_eq!(side, 256);
    let owners: Vec<u8> = all.iter().map(|&(p, _)| p).collect();
    assert_eq!(owners, (0..crate::MAX_PLAYERS).collect::<Vec<_>>());
    let min = fx_int(i64::from(side / 8) - 2).to_bits();
    for (i, &(p, a)) in all.iter().enumerate() {
        for &(q, b) in &all[i + 1..] {
            assert!(a.dist_sq_bits(b) >= min * min, "bases of {p} and {q}");
        }
    }
    // The eight-player table: (1, 1), (7, 7), (7, 1), (1, 7), (4, 1),
    // (4, 7), (1, 4), (7, 4) eighths of the side.
    let (side, eight) = bases(8);
    let table = [
        (1, 1),
        (7, 7),
        (7, 1),
        (1, 7),
        (4, 1),
        (4, 7),
        (1, 4),
        (7, 4),
    ];
    for (&(p, pos), (fx, fy)) in eight.iter().zip(table) {
        let at = |f: u16| fx_int(i64::from(side * f / 8));
        let (dx, dy) = (pos.x - at(fx), pos.y - at(fy));
        assert!(
            dx.abs() <= fx_int(2) && dy.abs() <= fx_int(2),
            "player {p} at {pos:?}"
        );
    }
}

#[test]
fn every_player_count_plays_and_round_trips() {
    for players in 1..=crate::MAX_PLAYERS {
        let setup = MatchSetup {
            seed: u64::from(players) * 77,
            players,
            ticks_per_turn: DEFAULT_TICKS_PER_TURN,
        };
        let mut w = World::new(&setup);
        assert_eq!(w.summary().players.len(), usize::from(players));
        let mut bots = crate::scenarios::bots(&w, 5, 600);
        crate::scenarios::play(&mut w, &mut bots, Turn(0), 60, |_, _, _| {});
        let back = World::restore(&w.snapshot()).unwrap();
        assert_eq!(back.state_hash(), w.state_hash());
        assert_eq!(back, w);
        assert!(w.summary().players.iter().all(|p| p.base_alive));
    }
}

/// `melee_armies(2, ..)` is `melee`; with 32 players every player owns a
/// strip of its block, units of every player engage and are engaged by
/// others, never their own, and units die.
#[test]
fn melee_armies_deals_the_battle_to_32_players_who_all_fight() {
    let two = crate::scenarios::melee_armies(2, 600, 9);
    assert_eq!(
        two.state_hash(),
        crate::scenarios::melee(600, 9).state_hash()
    );
    let mut w = crate::scenarios::melee_armies(32, 640, 9);
    assert_eq!(w.setup().players, 32);
    let mut owned = [0u32; 32];
    for e in w.entities() {
        if let (Some(o), false) = (e.owner, e.kind == UnitKind::Base) {
            owned[usize::from(o.0)] += 1;
        }
    }
    assert!(owned.iter().all(|&n| n > 0), "{owned:?}");
    let start = w.unit_count();
    let (mut engaging, mut engaged) = ([false; 32], [false; 32]);
    for t in 0..200 {
        w.step(Turn(t), &[]);
        for e in w.entities() {
            let target = e
                .target
                .and_then(|t| w.index_of(t))
                .map(|i| &w.entities()[i]);
            if let (Some(me), Some(them)) = (e.owner, target.and_then(|t| t.owner)) {
                assert_ne!(me, them, "turn {t}: a unit engages its own side");
                engaging[usize::from(me.0)] = true;
                engaged[usize::from(them.0)] = true;
            }
        }
    }
    assert!(engaging.iter().all(|&e| e), "{engaging:?}");
    assert!(engaged.iter().all(|&e| e), "{engaged:?}");
    assert!(w.unit_count() < start, "the armies fought");
}
