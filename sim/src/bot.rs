//! A seeded bot that plays the reference game from the state it sees:
//! keeps workers gathering, trains workers and an army, expands to new mine
//! clusters, defends its bases and attacks the nearest enemy base. Its pace
//! is an APM budget; its choices depend only on its seed and the world.

use crate::contract::{PlayerId, Turn};
use crate::game::{Command, Entity, Order, TICK_MS, UnitKind, World};
use crate::num::{Vec2, fx_int};
use crate::rng::Pcg32;

/// Most actions a bot takes in one turn, whatever its APM.
const MAX_ACTIONS_PER_TURN: u32 = 8;
/// Most units a bot puts in one command.
const GROUP: usize = 64;

/// A deterministic computer player.
#[derive(Clone, Debug)]
pub struct Bot {
    player: PlayerId,
    apm: u32,
    rng: Pcg32,
    /// APM budget carried between turns, in action-milliseconds.
    budget: u64,
    attack_at: usize,
}

struct View<'a> {
    bases: Vec<&'a Entity>,
    workers: Vec<&'a Entity>,
    army_idle: Vec<&'a Entity>,
    army: usize,
    enemy_bases: Vec<&'a Entity>,
    mines: Vec<&'a Entity>,
    resources: u32,
}

impl Bot {
    /// A bot for `player`, seeded, acting at most `apm` times per game minute.
    #[must_use]
    pub fn new(player: PlayerId, seed: u64, apm: u32) -> Self {
        let mut rng = Pcg32::from_seed(seed, 0xb07 + u64::from(player.0));
        let attack_at = 8 + rng.below(12) as usize;
        Self {
            player,
            apm,
            rng,
            budget: 0,
            attack_at,
        }
    }

    /// The player this bot commands.
    #[must_use]
    pub const fn player(&self) -> PlayerId {
        self.player
    }

    /// The commands for `turn`, decided from `world` (deterministic given the
    /// seed and the sequence of worlds seen).
    pub fn think(&mut self, world: &World, _turn: Turn) -> Vec<Command> {
        let turn_ms = u64::from(world.setup().ticks_per_turn) * u64::from(TICK_MS);
        self.budget += u64::from(self.apm) * turn_ms;
        let mut actions = u32::try_from(self.budget / 60_000).unwrap_or(u32::MAX);
        self.budget %= 60_000;
        actions = actions.min(MAX_ACTIONS_PER_TURN);
        let mut out = Vec::new();
        if actions == 0 || !world.player(self.player).is_some_and(|p| p.alive) {
            return out;
        }
        let view = self.view(world);
        let mut queued: Vec<(u32, usize)> =
            view.bases.iter().map(|b| (b.id, b.queue.len())).collect();
        let mut resources = view.resources;
        let mut used_workers: Vec<u32> = Vec::new();

        // 1. Idle workers go back to work.
        let idle: Vec<&Entity> = view
            .workers
            .iter()
            .copied()
            .filter(|w| w.order == Order::Idle)
            .collect();
        if let Some(first) = idle.first() {
            if let Some(mine) = nearest(&view.mines, first.pos) {
                let units: Vec<u32> = idle.iter().take(GROUP).map(|w| w.id).collect();
                used_workers.extend(&units);
                out.push(Command::Gather {
                    units,
                    mine: mine.id,
                });
            }
        }

        // 2. Defend: enemies close to one of our bases.
        if out.len() < actions as usize {
            if let Some(spot) = self.threat(world, &view) {
                let units: Vec<u32> = view.army_idle.iter().take(GROUP).map(|e| e.id).collect();
                if !units.is_empty() {
                    out.push(Command::AttackMove {
                        units,
                        x: spot.0,
                        y: spot.1,
                    });
                }
            }
        }

        // 3. Spend: workers first, then expansion, then army.
        let want_workers = 6 + 5 * view.bases.len();
        let mut worker_count = view.workers.len();
        while out.len() < actions as usize {
            let Some(slot) = queued.iter_mut().min_by_key(|(id, q)| (*q, *id)) else {
                break;
            };
            if slot.1 >= crate::game::MAX_QUEUE {
                break;
            }
            let kind = if worker_count < want_workers {
                UnitKind::Worker
            } else if self.rng.chance(3, 5) {
                UnitKind::Soldier
            } else {
                UnitKind::Archer
            };
            let cost = kind.stats().cost;
            if resources < cost {
                break;
            }
            // Save up for an expansion once the economy is running.
            let saving = view.bases.len() < 3
                && worker_count >= want_workers
                && view.army >= 6
                && resources < UnitKind::Base.stats().cost + cost
                && self.rng.chance(2, 3);
            if saving {
                break;
            }
            resources -= cost;
            slot.1 += 1;
            if kind == UnitKind::Worker {
                worker_count += 1;
            }
            out.push(Command::Train {
                base: slot.0,
                kind,
                count: 1,
            });
        }
        if out.len() < actions as usize
            && view.bases.len() < 3
            && resources >= UnitKind::Base.stats().cost
            && view.workers.len() >= 8
            && !view
                .workers
                .iter()
                .any(|w| matches!(w.order, Order::Build { .. }))
        {
            if let Some(site) = expansion_site(world, &view) {
                let builder = view
                    .workers
                    .iter()
                    .filter(|w| !used_workers.contains(&w.id))
                    .min_by_key(|w| (w.pos.dist_sq_bits(Vec2::tile_center(site.0, site.1)), w.id));
                if let Some(b) = builder {
                    out.push(Command::Build {
                        worker: b.id,
                        x: site.0,
                        y: site.1,
                    });
                }
            }
        }

        // 4. Attack once the idle army is big enough.
        if out.len() < actions as usize && view.army_idle.len() >= self.attack_at {
            let from = view.bases.first().map_or(Vec2::ZERO, |b| b.pos);
            if let Some(target) = nearest(&view.enemy_bases, from) {
                let units: Vec<u32> = view
                    .army_idle
                    .iter()
                    .take(GROUP * 2)
                    .map(|e| e.id)
                    .collect();
                let (x, y) = target.pos.tile();
                out.push(Command::AttackMove { units, x, y });
                self.attack_at = 8 + self.rng.below(16) as usize + view.army / 4;
            }
        }
        out
    }

    fn view<'a>(&self, world: &'a World) -> View<'a> {
        let mut v = View {
            bases: Vec::new(),
            workers: Vec::new(),
            army_idle: Vec::new(),
            army: 0,
            enemy_bases: Vec::new(),
            mines: Vec::new(),
            resources: world.player(self.player).map_or(0, |p| p.resources),
        };
        for e in world.entities() {
            let mine = e.owner == Some(self.player);
            match e.kind {
                UnitKind::Mine => v.mines.push(e),
                UnitKind::Base if mine => v.bases.push(e),
                UnitKind::Base => v.enemy_bases.push(e),
                UnitKind::Worker if mine => v.workers.push(e),
                UnitKind::Soldier | UnitKind::Archer if mine => {
                    v.army += 1;
                    if e.order == Order::Idle && e.target.is_none() {
                        v.army_idle.push(e);
                    }
                }
                _ => {}
            }
        }
        v
    }

    /// The tile of an enemy unit within 12 tiles of one of our bases, if any.
    fn threat(&self, world: &World, view: &View<'_>) -> Option<(u16, u16)> {
        let r = fx_int(12).to_bits();
        world
            .entities()
            .iter()
            .filter(|e| e.owner.is_some() && e.owner != Some(self.player) && e.kind.is_mobile())
            .find(|e| {
                view.bases
                    .iter()
                    .any(|b| b.pos.dist_sq_bits(e.pos) <= r * r)
            })
            .map(|e| e.pos.tile())
    }
}

fn nearest<'a>(list: &[&'a Entity], from: Vec2) -> Option<&'a Entity> {
    list.iter()
        .copied()
        .min_by_key(|e| (from.dist_sq_bits(e.pos), e.id))
}

/// A free, walkable tile next to the nearest mine that has no base near it.
fn expansion_site(world: &World, view: &View<'_>) -> Option<(u16, u16)> {
    let home = view.bases.first()?.pos;
    let far = fx_int(10).to_bits();
    let mut candidates: Vec<&Entity> = view
        .mines
        .iter()
        .copied()
        .filter(|m| {
            world
                .entities()
                .iter()
                .filter(|b| b.kind == UnitKind::Base)
                .all(|b| b.pos.dist_sq_bits(m.pos) > far * far)
        })
        .collect();
    candidates.sort_by_key(|m| (home.dist_sq_bits(m.pos), m.id));
    let clear = fx_int(5).to_bits();
    for m in candidates.into_iter().take(4) {
        let mt = m.pos.tile();
        for dist in 6..=8i32 {
            for (dx, dy) in [(dist, 0), (-dist, 0), (0, dist), (0, -dist)] {
                let Some(t) = world.map().offset(mt, dx, dy) else {
                    continue;
                };
                let c = Vec2::tile_center(t.0, t.1);
                let free = world.map().walkable(t)
                    && world.entities().iter().all(|e| {
                        !matches!(e.kind, UnitKind::Base | UnitKind::Mine)
                            || e.pos.dist_sq_bits(c) > clear * clear
                    });
                if free {
                    return Some(t);
                }
            }
        }
    }
    None
}

impl crate::Agent<World> for Bot {
    fn player(&self) -> PlayerId {
        Self::player(self)
    }
    fn think(&mut self, world: &World, turn: Turn) -> Vec<Command> {
        Self::think(self, world, turn)
    }
}
