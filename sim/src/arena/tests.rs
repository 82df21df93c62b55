//! Behaviour tests of the arena: flight, bounces, shots, kills, respawns,
//! pickups, hostile commands, the end of a match, fault injection and
//! snapshot validation.

use super::*;
use crate::num::Vec2;
use crate::{MatchSetup, PlayerId, Simulation, SnapshotError, Stamped, Turn};

/// A rock-free 40x40 arena for `players` players, ships parked far apart,
/// pickups postponed.
fn open_arena(players: u8) -> Arena {
    let setup = MatchSetup {
        seed: 9,
        players,
        ticks_per_turn: DEFAULT_TICKS_PER_TURN,
    };
    let config = ArenaConfig {
        side: 40,
        obstacles: 0,
        score_limit: 3,
        turn_limit: 100_000,
    };
    let mut w = Arena::generate(&setup, &config);
    w.s.next_pickup_at = u32::MAX;
    for (i, s) in w.s.ships.iter_mut().enumerate() {
        s.pos = at(5 + 4 * i64::try_from(i).unwrap(), 35);
        s.heading = 0;
    }
    w
}

fn at(x: i64, y: i64) -> Vec2 {
    Vec2::new(fx_int(x), fx_int(y))
}

fn cmds(list: &[(u8, Command)]) -> Vec<Stamped<Command>> {
    list.iter()
        .enumerate()
        .map(|(i, &(p, command))| Stamped {
            player: PlayerId(p),
            seq: u16::try_from(i).unwrap(),
            command,
        })
        .collect()
}

fn run(w: &mut Arena, turns: u32, inputs: &[Stamped<Command>]) {
    for _ in 0..turns {
        let t = w.last_turn().map_or(0, |t| t.0 + 1);
        w.step(Turn(t), inputs);
    }
}

#[test]
fn thrust_accelerates_along_the_heading_up_to_the_speed_cap_and_drag_stops_it() {
    let mut w = open_arena(2);
    w.s.ships[0].pos = at(5, 20);
    run(
        &mut w,
        1,
        &cmds(&[(0, Command::Thrust { power: MAX_POWER })]),
    );
    let v1 = w.ships()[0].vel;
    assert!(v1.x > Fx::ZERO && v1.y == Fx::ZERO, "{v1:?}");
    run(&mut w, 30, &[]);
    let s = &w.ships()[0];
    assert!(
        s.vel.length() <= MAX_SPEED && s.vel.length() > MAX_SPEED * 9 / 10,
        "{s:?}"
    );
    assert_eq!(s.thrust, MAX_POWER, "thrust is held between turns");
    run(&mut w, 1, &cmds(&[(0, Command::Thrust { power: 0 })]));
    let before = w.ships()[0].vel.length();
    run(&mut w, 1, &cmds(&[(0, Command::Brake)]));
    let braked = w.ships()[0].vel.length();
    assert!(braked < before * 4 / 5, "{braked} vs {before}");
    run(&mut w, 1, &[]);
    let coasting = w.ships()[0].vel.length();
    assert!(
        coasting < braked && coasting > braked * 9 / 10,
        "brake lasts one turn"
    );
}

#[test]
fn turning_wraps_the_heading_and_boost_exceeds_cruising_speed_once() {
    let mut w = open_arena(2);
    run(&mut w, 1, &cmds(&[(0, Command::Turn { rate: -3 })]));
    assert_eq!(w.ships()[0].heading, HEADINGS - 6);
    run(&mut w, 1, &cmds(&[(0, Command::Turn { rate: 0 })]));
    w.s.ships[0].heading = 0;
    w.s.ships[0].pos = at(5, 20);
    run(&mut w, 1, &cmds(&[(0, Command::Boost)]));
    assert!(w.ships()[0].vel.length() > MAX_SPEED);
    assert_eq!(w.ships()[0].boost_cooldown, BOOST_COOLDOWN - 2);
    let v = w.ships()[0].vel;
    run(&mut w, 1, &cmds(&[(0, Command::Boost)]));
    assert!(
        w.ships()[0].vel.length() < v.length(),
        "no second boost while recharging"
    );
}

#[test]
fn ships_bounce_off_walls_and_rocks() {
    let mut w = open_arena(2);
    w.s.ships[0].pos = at(39, 20);
    w.s.ships[0].vel = Vec2::new(MAX_SPEED, Fx::ZERO);
    run(&mut w, 1, &[]);
    let s = &w.ships()[0];
    assert!(s.pos.x <= fx_int(40) - SHIP_RADIUS && s.vel.x < Fx::ZERO);

    w.s.map = super::map::ArenaMap::generate(40, 0, 2, &mut crate::rng::Pcg32::new(1, 1));
    let mut rocky = w.s.map.clone();
    rocky = with_rock(rocky, at(20, 20), fx_int(2));
    w.s.map = rocky;
    w.s.ships[0].pos = Vec2::new(crate::num::fx_ratio(172, 10), fx_int(20));
    w.s.ships[0].vel = Vec2::new(MAX_SPEED, Fx::ZERO);
    run(&mut w, 1, &[]);
    let s = &w.ships()[0];
    assert!(s.pos.distance(at(20, 20)) >= fx_int(2) + SHIP_RADIUS - Fx::from_bits(4));
    assert!(s.vel.x < Fx::ZERO, "bounced back: {:?}", s.vel);
}

fn with_rock(map: super::map::ArenaMap, pos: Vec2, radius: Fx) -> super::map::ArenaMap {
    // Rebuild through serde: the map's fields are private to its module.
    let mut bytes = postcard::to_allocvec(&map).unwrap();
    let (side, _, spawns): (u16, Vec<Obstacle>, Vec<Vec2>) = postcard::from_bytes(&bytes).unwrap();
    bytes = postcard::to_allocvec(&(side, vec![Obstacle { pos, radius }], spawns)).unwrap();
    postcard::from_bytes(&bytes).unwrap()
}

/// Ship 0 at (10, 20) facing ship 1 at (`x`, 20).
fn duel(x: i64) -> Arena {
    let mut w = open_arena(2);
    w.s.ships[0].pos = at(10, 20);
    w.s.ships[1].pos = at(x, 20);
    w
}

#[test]
fn a_shot_travels_hits_and_five_hits_destroy_a_ship_and_score() {
    let mut w = duel(18);
    run(&mut w, 1, &cmds(&[(0, Command::Fire)]));
    assert_eq!(w.projectiles().len(), 1, "in flight, not instant");
    assert_eq!(w.ships()[1].hp, SHIP_HP);
    run(&mut w, 6, &[]);
    assert!(w.projectiles().is_empty());
    assert_eq!(w.ships()[1].hp, SHIP_HP - PROJECTILE_DAMAGE);
    assert_eq!((w.ships()[0].shots, w.ships()[0].hits), (1, 1));
    // Held trigger: one shot per cooldown.
    run(&mut w, 1, &cmds(&[(0, Command::Fire)]));
    run(&mut w, 1, &cmds(&[(0, Command::Fire)]));
    assert_eq!(w.ships()[0].shots, 2, "cooldown of {FIRE_COOLDOWN} ticks");
    for _ in 0..40 {
        run(&mut w, 1, &cmds(&[(0, Command::Fire)]));
        if !w.ships()[1].alive {
            break;
        }
    }
    let (a, b) = (&w.ships()[0], &w.ships()[1]);
    assert!(!b.alive);
    assert_eq!((a.score, b.deaths, a.hits), (1, 1, 5));
    assert_eq!(b.respawn_in, RESPAWN_TICKS - 1);
}

#[test]
fn a_rock_stops_a_shot_and_the_shooter_never_hits_itself() {
    let mut w = duel(18);
    w.s.map = with_rock(w.s.map.clone(), at(14, 20), fx_int(1));
    run(&mut w, 10, &cmds(&[(0, Command::Fire)]));
    assert!(w.ships()[0].shots > 0);
    assert_eq!(w.ships()[1].hp, SHIP_HP);
    assert_eq!(w.ships()[0].hp, SHIP_HP);
}

#[test]
fn destroyed_ships_respawn_after_the_delay_with_a_spawn_shield() {
    let mut w = duel(18);
    w.s.ships[1].hp = PROJECTILE_DAMAGE;
    run(&mut w, 1, &cmds(&[(0, Command::Fire)]));
    run(&mut w, 5, &[]);
    assert!(!w.ships()[1].alive);
    let left = u32::from(w.ships()[1].respawn_in);
    let turns = left.div_ceil(u32::from(DEFAULT_TICKS_PER_TURN));
    run(&mut w, turns - 1, &[]);
    assert!(!w.ships()[1].alive);
    run(&mut w, 1, &[]);
    let s = &w.ships()[1];
    assert!(s.alive && s.hp == SHIP_HP && s.shield == SPAWN_SHIELD);
    assert!(w.map().spawns().contains(&s.pos));
}

#[test]
fn shields_absorb_first_and_pickups_apply_their_effect() {
    let mut w = duel(18);
    w.s.ships[1].shield = 30;
    run(&mut w, 1, &cmds(&[(0, Command::Fire)]));
    run(&mut w, 5, &[]);
    assert_eq!((w.ships()[1].shield, w.ships()[1].hp), (10, SHIP_HP));
    w.s.ships[1].hp = 10;
    let id = w.s.next_id;
    w.s.next_id += 3;
    let p = w.ships()[1].pos;
    w.s.pickups = PickupKind::ALL
        .iter()
        .enumerate()
        .map(|(i, &kind)| Pickup {
            id: id + u32::try_from(i).unwrap(),
            kind,
            pos: p,
        })
        .collect();
    run(&mut w, 1, &[]);
    let s = &w.ships()[1];
    assert!(w.pickups().is_empty());
    assert_eq!(s.hp, 10 + HEALTH_BONUS);
    assert_eq!(s.shield, 10 + SHIELD_BONUS);
    assert_eq!(s.rapid, RAPID_FIRE_TICKS - 1, "collected on the first tick");
}

#[test]
fn pickups_appear_at_seeded_places_and_times() {
    let setup = MatchSetup {
        seed: 5,
        players: 4,
        ticks_per_turn: 2,
    };
    let mut a = Arena::new(&setup);
    let mut b = Arena::new(&setup);
    run(&mut a, 300, &[]);
    run(&mut b, 300, &[]);
    assert!(!a.pickups().is_empty());
    assert_eq!(a.pickups(), b.pickups());
    for p in a.pickups() {
        assert!(!a.map().blocked(p.pos, fx_int(1)) && a.map().inside(p.pos, fx_int(2)));
    }
    let mut c = Arena::new(&MatchSetup { seed: 6, ..setup });
    run(&mut c, 300, &[]);
    assert_ne!(a.pickups(), c.pickups());
}

#[test]
fn hostile_commands_are_ignored_or_clamped_and_counted() {
    let mut w = duel(30);
    let mut list = vec![
        (7, Command::Fire),
        (0, Command::Thrust { power: 200 }),
        (0, Command::Turn { rate: i8::MIN }),
    ];
    list.extend(std::iter::repeat_n((1, Command::Brake), 12));
    run(&mut w, 1, &cmds(&list));
    let r = w.rejected();
    assert_eq!(r.unknown_player, 1);
    assert_eq!(r.clamped, 2);
    assert_eq!(r.over_cap, 12 - u32::from(MAX_COMMANDS_PER_TURN));
    assert_eq!(w.ships()[0].thrust, MAX_POWER);
    assert_eq!(w.ships()[0].turn, -MAX_TURN_RATE);
    w.s.ships[1].alive = false;
    w.s.ships[1].hp = 0;
    w.s.ships[1].respawn_in = 50;
    run(&mut w, 1, &cmds(&[(1, Command::Thrust { power: 1 })]));
    assert_eq!(w.rejected().dead_ship, 1);
    assert_eq!(w.ships()[1].thrust, 0);
}

#[test]
fn the_score_limit_ends_the_match_and_freezes_the_world() {
    let mut w = duel(18);
    w.s.ships[0].score = 2;
    w.s.ships[1].hp = PROJECTILE_DAMAGE;
    run(&mut w, 5, &cmds(&[(0, Command::Fire)]));
    assert_eq!(w.outcome(), Some(Outcome::ScoreLimit(PlayerId(0))));
    assert!(w.is_over());
    assert_eq!(w.winner(), Some(PlayerId(0)));
    let (tick, snapshot) = (w.tick(), w.ships().to_vec());
    run(&mut w, 50, &cmds(&[(0, Command::Thrust { power: 4 })]));
    assert_eq!((w.tick(), w.ships()), (tick, &snapshot[..]));
}

#[test]
fn the_turn_limit_gives_the_best_score_or_a_draw() {
    let mut w = open_arena(3);
    w.s.config.turn_limit = 10;
    w.s.ships[2].score = 1;
    run(&mut w, 9, &[]);
    assert!(!w.is_over());
    run(&mut w, 1, &[]);
    assert_eq!(w.outcome(), Some(Outcome::TimeLimit(PlayerId(2))));
    let mut w = open_arena(3);
    w.s.config.turn_limit = 10;
    run(&mut w, 10, &[]);
    assert_eq!((w.outcome(), w.winner()), (Some(Outcome::Draw), None));
}

#[test]
fn perturb_changes_exactly_the_ships_section() {
    let mut w = Arena::new(&MatchSetup {
        seed: 1,
        players: 4,
        ticks_per_turn: 2,
    });
    let before = w.section_hashes();
    w.perturb(6);
    let diff = crate::hash::diff_sections(&before, &w.section_hashes());
    assert_eq!(diff, ["ships"]);
    assert_eq!(w.ships()[2].hp, SHIP_HP - 1, "salt 6 of 4 ships is ship 2");
}

/// Forensics names exactly the ship and field `perturb` changed, with both
/// values, and every section's entity list checks against its hash.
#[test]
fn forensics_names_the_perturbed_ship_and_field() {
    let mut w = duel(18);
    run(&mut w, 40, &[]);
    assert!(crate::forensics::sections_are_consistent(&w));
    let (section, id, field) = w.perturb_target(7).unwrap();
    let mut p = w.clone();
    p.perturb(7);
    let diff = crate::forensics::narrow(&w, &p, 8);
    assert_eq!(diff.len(), 1, "{diff:?}");
    assert_eq!(
        (diff[0].section.as_str(), diff[0].id),
        (section.as_str(), id)
    );
    let before = w.ships()[usize::try_from(id).unwrap()].hp;
    let after = p.ships()[usize::try_from(id).unwrap()].hp;
    assert_eq!(field, "hp");
    assert_eq!(
        diff[0].fields,
        vec![crate::forensics::FieldDiff {
            path: "hp".into(),
            a: Some(before.to_string()),
            b: Some(after.to_string()),
        }]
    );
}

#[test]
fn corrupt_snapshots_are_errors() {
    let w = duel(18);
    let good = w.snapshot();
    assert_eq!(Arena::restore(&good).unwrap(), w);
    assert!(matches!(
        Arena::restore(&good[..good.len() - 1]),
        Err(SnapshotError::Decode(_))
    ));
    assert!(
        Arena::restore(b"SIMW\x01").is_err(),
        "the RTS's snapshot tag"
    );
    let mut bad = w.clone();
    bad.s.ships[1].pos = at(500, 20);
    assert!(matches!(
        Arena::restore(&bad.snapshot()),
        Err(SnapshotError::Invalid(_))
    ));
    let mut bad = w.clone();
    bad.s.ships.pop();
    assert!(Arena::restore(&bad.snapshot()).is_err());
    let mut bad = w;
    bad.s.ships[0].heading = HEADINGS;
    assert!(Arena::restore(&bad.snapshot()).is_err());
}

#[test]
fn rules_hash_covers_the_rules_and_the_map() {
    let setup = MatchSetup {
        seed: 1,
        players: 2,
        ticks_per_turn: 2,
    };
    let a = Arena::new(&setup);
    assert_eq!(a.rules_hash(), Arena::new(&setup).rules_hash());
    let mut config = ArenaConfig::standard(2);
    config.score_limit += 1;
    assert_ne!(
        a.rules_hash(),
        Arena::generate(&setup, &config).rules_hash()
    );
    let other_map = Arena::new(&MatchSetup { seed: 2, ..setup });
    assert_ne!(a.rules_hash(), other_map.rules_hash());
    let names: Vec<String> = a.section_hashes().into_iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        ["globals", "arena", "ships", "projectiles", "pickups"]
    );
}

#[test]
fn generated_arenas_keep_spawns_clear_and_inside() {
    for players in 1..=crate::MAX_PLAYERS {
        for seed in 0..20 {
            let w = Arena::new(&MatchSetup {
                seed,
                players,
                ticks_per_turn: 2,
            });
            let m = w.map();
            assert!(!m.obstacles().is_empty());
            for &p in m.spawns() {
                assert!(m.inside(p, fx_int(3)) && !m.blocked(p, fx_int(2)));
            }
            let mut starts: Vec<Vec2> = w.ships().iter().map(|s| s.pos).collect();
            starts.dedup();
            assert_eq!(starts.len(), usize::from(players));
        }
    }
}

/// Lets only player 0's bot act for `turns` turns.
fn bot_alone(w: &mut Arena, turns: u32) {
    let mut bot = Bot::new(PlayerId(0), 3, BOT_APM);
    for _ in 0..turns {
        let t = w.last_turn().map_or(0, |t| t.0 + 1);
        let inputs: Vec<Stamped<Command>> = bot
            .think(w, Turn(t))
            .into_iter()
            .enumerate()
            .map(|(i, command)| Stamped {
                player: PlayerId(0),
                seq: u16::try_from(i).unwrap(),
                command,
            })
            .collect();
        w.step(Turn(t), &inputs);
    }
}

#[test]
fn the_bot_leads_a_crossing_target_and_hits_it() {
    let mut w = open_arena(2);
    w.s.ships[0].pos = at(20, 32);
    w.s.ships[0].heading = HEADINGS / 4 * 3;
    // The target crosses 14 tiles ahead at cruising speed, never turning.
    w.s.ships[1].pos = at(6, 18);
    w.s.ships[1].vel = Vec2::new(MAX_SPEED, Fx::ZERO);
    w.s.ships[1].thrust = MAX_POWER;
    bot_alone(&mut w, 12);
    let (a, b) = (&w.ships()[0], &w.ships()[1]);
    assert!(a.shots > 0);
    assert!(a.hits > 0 && b.hp < SHIP_HP, "{a:?}");
}

#[test]
fn the_bot_fetches_a_health_pickup_when_hurt() {
    let mut w = open_arena(2);
    w.s.ships[0].pos = at(10, 10);
    w.s.ships[0].hp = 30;
    // The only enemy is destroyed for a while: nothing to fight.
    w.s.ships[1].alive = false;
    w.s.ships[1].hp = 0;
    w.s.ships[1].respawn_in = RESPAWN_TICKS;
    w.s.pickups = vec![Pickup {
        id: 0,
        kind: PickupKind::Health,
        pos: at(25, 20),
    }];
    w.s.next_id = 1;
    bot_alone(&mut w, 40);
    assert!(w.pickups().is_empty(), "{:?}", w.ships()[0]);
    assert_eq!(w.ships()[0].hp, 30 + HEALTH_BONUS);
}
