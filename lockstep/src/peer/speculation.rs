//! The speculative view: a second, disposable world forked from the latest
//! confirmed one and advanced over the turns not confirmed yet, with this
//! player's own pending commands at the turn the relay will stamp them and
//! "no command" for everyone else, so a player sees their own click at once.
//!
//! The authoritative stream never sees it: the confirmed world steps only on
//! complete bundles, hashes, replays and desync reports come from it alone.
//! The speculative world is re-derived from the confirmed one whenever a
//! confirmed turn arrives or an own command lands in a turn it already
//! simulated, and it is simply thrown away: there is nothing to roll back,
//! so a misprediction costs one re-derivation, never a desync.
//!
//! Sans-IO like the rest of the peer: [`Speculation::handle_frame`] is given
//! the frame's time and a caller-supplied clock to measure its own work
//! with. It never takes more of a frame than [`SpeculationConfig::budget`]:
//! before each fork or step it checks the time spent against the budget and
//! an estimate of that piece of work, and stops when it would pass it. The
//! view then falls back to the confirmed world for that frame, and the
//! derivation resumes where it stopped at the next frame: the work per
//! frame is bounded by construction, so there is no death spiral.

use crate::time::{Duration, Instant};
use sim::culling::CulledStep;
use sim::forensics::{EntityHash, diff_entities, entities_match_section};
use sim::{PlayerId, SectionHash, Simulation, Stamped, Turn};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Own-feedback samples kept for the percentiles.
const FEEDBACK_SAMPLES: usize = 4096;

/// How a peer speculates; [`PeerBuilder::with_speculation`](super::PeerBuilder::with_speculation)
/// takes it. The defaults suit a 60 fps game.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpeculationConfig {
    /// Most of a frame speculation may take (default 4.175 ms: 25 % of a
    /// 16.7 ms frame). Past it the view is the confirmed world for that
    /// frame. A fork or step starts only if its estimated cost (the median
    /// of its recent costs) still fits, so a frame passes the budget by at
    /// most one piece of work that cost more than usual (for a few frames
    /// after work got dearer for good); work that never fits is measured
    /// again once every nine frames.
    pub budget: Duration,
    /// Most turns the speculative world runs ahead of the confirmed one
    /// (default 16): bounds the work of one derivation when the confirmed
    /// stream stalls (a lost bundle being resent, a frozen path). An own
    /// command landing beyond it shows once the confirmed world catches up.
    pub max_ahead: u32,
    /// Compare the speculative world with the confirmed one at each turn,
    /// entity by entity, and count the corrections (default on). Costs one
    /// pass of [`Simulation::entity_hashes`] per derivation.
    pub count_corrections: bool,
    /// Own commands not seen in a confirmed turn this long after they were
    /// submitted are dropped from the view (refused or lost; default 5 s).
    pub forget_after: Duration,
}

impl Default for SpeculationConfig {
    fn default() -> Self {
        Self {
            budget: Duration::from_micros(4_175),
            max_ahead: 16,
            count_corrections: true,
            forget_after: Duration::from_secs(5),
        }
    }
}

/// The optional hook for games that can fork or step a speculative world
/// better than the defaults. The default [`SnapshotFork`] works for every
/// [`Simulation`] (snapshot, then restore); [`CloneFork`] copies a world
/// that is `Clone` in place, reusing its allocations.
pub trait SpeculationHook<S: Simulation>: Send {
    /// Makes `into` a copy of `confirmed` (`None`: there is no copy yet, or
    /// the last fork failed). Return `false` if it cannot: the view then
    /// shows the confirmed world.
    fn fork(&mut self, confirmed: &S, into: &mut Option<S>) -> bool;

    /// Steps the speculative world (default: [`Simulation::step`]). A game
    /// may skip work a speculative view does not show; corrections are then
    /// counted against what it computes.
    fn step(&mut self, world: &mut S, turn: Turn, inputs: &[Stamped<S::Command>]) {
        world.step(turn, inputs);
    }

    /// The entity hashes of `section` the correction probe keeps after the
    /// first speculative turn, and whether they are the whole section
    /// (default: [`Simulation::entity_hashes`], the whole section). A hook
    /// whose `step` skips entities lists only those it stepped (`false`),
    /// and only those are compared with the confirmed world.
    fn probe(&mut self, world: &S, section: &str) -> (Vec<EntityHash>, bool) {
        (world.entity_hashes(section), true)
    }

    /// Whether the speculative world no longer suits the view and must be
    /// forked again at this frame, though no turn was confirmed (default:
    /// never; [`CullToArea`]: the camera moved).
    fn stale(&mut self) -> bool {
        false
    }
}

/// The area a [`CullToArea`] view steps, shared between the hook and the
/// game's renderer, which sets it from its camera every frame or when the
/// camera moves. `None`: the whole world.
#[derive(Debug, Default)]
pub struct ViewArea<A>(Arc<Mutex<Option<A>>>);

impl<A> Clone for ViewArea<A> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<A: Clone> ViewArea<A> {
    /// A shared area, `None` for the whole world.
    #[must_use]
    pub fn new(area: Option<A>) -> Self {
        Self(Arc::new(Mutex::new(area)))
    }

    /// Sets the area the next speculative steps cover.
    pub fn set(&self, area: Option<A>) {
        // A renderer that panicked holding the lock left a plain value: use it.
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = area;
    }

    /// The area now.
    #[must_use]
    pub fn get(&self) -> Option<A> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Prediction culling for a game that implements
/// [`sim::culling::CulledStep`]: forks only what a view of the
/// [`ViewArea`] (the screen) needs and steps only the entities within it,
/// so a view of a world of thousands of units re-derives within a frame.
/// What is off screen is not in the speculative world (draw it from the
/// confirmed one) or keeps its confirmed state; corrections are counted
/// over the entities on screen. Without an area it forks by `Clone` like
/// [`CloneFork`] and steps everything.
///
/// Use it when whole speculative steps fall back (the speculation's
/// `fallbacks` grow): a few thousand units or more.
#[derive(Debug)]
pub struct CullToArea<S: CulledStep> {
    area: ViewArea<S::Area>,
    /// The area of the current derivation: one area for all its steps and
    /// its probe, whatever the renderer sets meanwhile.
    current: Option<S::Area>,
}

impl<S: CulledStep> CullToArea<S> {
    /// A hook stepping what `area` holds.
    #[must_use]
    pub const fn new(area: ViewArea<S::Area>) -> Self {
        Self {
            area,
            current: None,
        }
    }
}

impl<S: CulledStep + Clone> SpeculationHook<S> for CullToArea<S> {
    fn fork(&mut self, confirmed: &S, into: &mut Option<S>) -> bool {
        self.current = self.area.get();
        match &self.current {
            Some(area) => {
                confirmed.fork_within(area, into);
                true
            }
            None => CloneFork.fork(confirmed, into),
        }
    }

    fn step(&mut self, world: &mut S, turn: Turn, inputs: &[Stamped<S::Command>]) {
        match &self.current {
            Some(area) => world.step_culled(turn, inputs, area),
            None => world.step(turn, inputs),
        }
    }

    fn stale(&mut self) -> bool {
        self.area.get() != self.current
    }

    fn probe(&mut self, world: &S, section: &str) -> (Vec<EntityHash>, bool) {
        match &self.current {
            Some(area) => (world.entity_hashes_within(section, area), false),
            None => (world.entity_hashes(section), true),
        }
    }
}

/// Forks by [`Simulation::snapshot`] and [`Simulation::restore`]: works for
/// every game; the default.
#[derive(Clone, Copy, Debug, Default)]
pub struct SnapshotFork;

impl<S: Simulation> SpeculationHook<S> for SnapshotFork {
    fn fork(&mut self, confirmed: &S, into: &mut Option<S>) -> bool {
        *into = S::restore(&confirmed.snapshot()).ok();
        into.is_some()
    }
}

/// Forks by `Clone::clone_from` for a game whose world is `Clone`: usually
/// cheaper than a snapshot, and the speculative world's memory is reused.
#[derive(Clone, Copy, Debug, Default)]
pub struct CloneFork;

impl<S: Simulation + Clone> SpeculationHook<S> for CloneFork {
    fn fork(&mut self, confirmed: &S, into: &mut Option<S>) -> bool {
        match into {
            Some(w) => w.clone_from(confirmed),
            None => *into = Some(confirmed.clone()),
        }
        true
    }
}

/// What speculation did so far, for a summary or a benchmark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpeculationStats {
    /// Frames handled ([`Speculation::handle_frame`] calls).
    pub frames: u64,
    /// Frames whose view fell back to the confirmed world: the budget ran
    /// out before the speculative world was up to date (or a fork failed).
    pub fallbacks: u64,
    /// Forks from the confirmed world (derivations begun).
    pub forks: u64,
    /// Speculative turns stepped.
    pub steps: u64,
    /// Confirmed turns compared with the speculative world's view of them.
    pub compared_turns: u64,
    /// Of those, turns where at least one entity differed.
    pub mispredicted_turns: u64,
    /// Corrections: entities whose speculative hash differed from the
    /// confirmed one at the same turn, summed over compared turns.
    pub corrections: u64,
    /// The largest correction of one entity: the most consecutive compared
    /// turns one entity was mispredicted in.
    pub max_correction_turns: u32,
    /// Own commands shown in the speculative view.
    pub shown: u64,
    /// Of those, the ones shown by the first frame after their submission.
    pub shown_next_frame: u64,
    /// The most frames an own command waited to be shown.
    pub most_frames_to_show: u32,
    /// Own commands dropped from the view unconfirmed
    /// ([`SpeculationConfig::forget_after`]).
    pub forgotten: u64,
    /// Own commands dropped from the view because the relay refused their
    /// input ([`Speculation::handle_refused`]).
    pub refused: u64,
}

/// One own command waiting for its confirmed turn.
#[derive(Clone, Debug)]
struct Pending<C> {
    /// When the game submitted it.
    at: Instant,
    /// The turn it is expected in.
    turn: Turn,
    /// Who submitted it (this peer's slot).
    player: PlayerId,
    commands: Vec<C>,
    /// Whether a frame has shown it yet.
    shown: bool,
    /// Frames handled since it was submitted, until one showed it.
    frames: u32,
}

/// The speculative world's entity hashes at one turn, per section.
#[derive(Debug)]
struct Probe {
    turn: Turn,
    /// Per section: the entity hashes, and whether they are the whole section.
    sections: Vec<(String, Vec<EntityHash>, bool)>,
}

/// The speculative view of game `S`: a disposable world forked from the
/// confirmed one and stepped over the unconfirmed turns with this player's
/// own pending commands, within a per-frame budget. A
/// [`Peer`](super::Peer) built with
/// [`with_speculation`](super::PeerBuilder::with_speculation) drives one;
/// use it directly over another carrier, or in a test: feed it
/// [`handle_submit`](Self::handle_submit) for each own command,
/// [`handle_confirmed`](Self::handle_confirmed) for each confirmed turn and
/// [`handle_frame`](Self::handle_frame) once per rendered frame, then draw
/// [`view`](Self::view). It only reads the confirmed world: hashes, replays
/// and desync reports never see it.
pub struct Speculation<S: Simulation> {
    config: SpeculationConfig,
    hook: Box<dyn SpeculationHook<S>>,
    /// The speculative world (possibly part-way through a derivation).
    world: Option<S>,
    /// The first unconfirmed turn when `world` was forked (`None`: no fork).
    base: Option<Turn>,
    /// The next turn `world` would step.
    next: Turn,
    /// The last turn the view must reach this frame, as of the last frame.
    target: Option<Turn>,
    /// `world` is up to date and shown.
    current: bool,
    own: VecDeque<Pending<S::Command>>,
    probe: Option<Probe>,
    /// The section names of the confirmed world, as last seen.
    section_names: Vec<String>,
    /// Mispredicted entities of the last compared turn, with their streaks.
    streaks: BTreeMap<(String, u64), u32>,
    fork_cost: Cost,
    step_cost: Cost,
    /// Frames in a row an estimate over the budget kept work from starting.
    blocked: u32,
    feedback: VecDeque<Duration>,
    stats: SpeculationStats,
}

impl<S: Simulation> std::fmt::Debug for Speculation<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Speculation")
            .field("config", &self.config)
            .field("base", &self.base)
            .field("next", &self.next)
            .field("current", &self.current)
            .field("own", &self.own.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// The own commands expected in `turn`, as the confirmed turn will decode
/// them: each chunk numbered from 0, then in canonical order.
fn own_inputs<C: Clone>(own: &VecDeque<Pending<C>>, turn: Turn) -> Vec<Stamped<C>> {
    let mut inputs = Vec::new();
    for p in own.iter().filter(|p| p.turn == turn) {
        for (i, c) in p.commands.iter().enumerate() {
            inputs.push(Stamped {
                player: p.player,
                seq: u16::try_from(i).unwrap_or(u16::MAX),
                command: c.clone(),
            });
        }
    }
    sim::canonical_order(&mut inputs);
    inputs
}

/// Frames in a row work that never fits the budget is kept from starting
/// before it is measured again (once, at the start of a frame).
const REMEASURE_AFTER: u32 = 8;
/// Samples of one kind of work kept for its estimate.
const COST_SAMPLES: usize = 8;

/// What one kind of work (a fork, a step) costs: the median of its recent
/// samples, so that one slow sample (a preempted thread) does not keep the
/// view from the next frames, while work that got dearer for good is
/// estimated so within a few frames.
#[derive(Debug, Default)]
struct Cost {
    recent: VecDeque<Duration>,
}

impl Cost {
    fn record(&mut self, sample: Duration) {
        if self.recent.len() >= COST_SAMPLES {
            self.recent.pop_front();
        }
        self.recent.push_back(sample);
    }

    fn estimate(&self) -> Duration {
        let mut v: Vec<Duration> = self.recent.iter().copied().collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(Duration::ZERO)
    }
}

impl<S: Simulation> Speculation<S> {
    /// Speculation forking by snapshot and restore ([`SnapshotFork`]).
    #[must_use]
    pub fn new(config: SpeculationConfig) -> Self {
        Self::with_hook(config, SnapshotFork)
    }

    /// Speculation with a game's own [`SpeculationHook`] (e.g. [`CloneFork`]).
    #[must_use]
    pub fn with_hook(config: SpeculationConfig, hook: impl SpeculationHook<S> + 'static) -> Self {
        Self {
            config,
            hook: Box::new(hook),
            world: None,
            base: None,
            next: Turn(0),
            target: None,
            current: false,
            own: VecDeque::new(),
            probe: None,
            section_names: Vec::new(),
            streaks: BTreeMap::new(),
            fork_cost: Cost::default(),
            step_cost: Cost::default(),
            blocked: 0,
            feedback: VecDeque::new(),
            stats: SpeculationStats::default(),
        }
    }

    /// The settings.
    #[must_use]
    pub const fn config(&self) -> &SpeculationConfig {
        &self.config
    }

    /// The game submitted own `commands` at `at`; the relay is expected to
    /// stamp them into `turn` (see
    /// [`Session::landing_turn`](crate::low_level::session::Session::landing_turn)).
    /// `player` is this peer's slot. The next frame shows them.
    pub fn handle_submit(
        &mut self,
        at: Instant,
        player: PlayerId,
        turn: Turn,
        commands: Vec<S::Command>,
    ) {
        if commands.is_empty() {
            return;
        }
        // Commands keep their order: a later one never lands before an earlier one.
        let turn = self.own.back().map_or(turn, |p| p.turn.max(turn));
        if self.base.is_some() && turn < self.next {
            // The speculative world already simulated that turn without it.
            self.base = None;
        }
        self.own.push_back(Pending {
            at,
            turn,
            player,
            commands,
            shown: false,
            frames: 0,
        });
    }

    /// The relay refused own submissions made at `submitted` (the session's
    /// `InputRefused`): they will be in no bundle, so they leave the view
    /// (at the next frame) and no later confirmed chunk retires them.
    pub fn handle_refused(&mut self, submitted: &[Instant]) {
        for at in submitted {
            if let Some(i) = self.own.iter().position(|p| p.at == *at) {
                self.own.remove(i);
                self.stats.refused += 1;
                // The speculative world may hold it already.
                self.base = None;
            }
        }
    }

    /// The confirmed world was stepped through `turn` (whose section hashes
    /// are `sections`), and `own_chunks` of this player's submissions were
    /// in it. Counts the corrections against the speculative world's view of
    /// `turn` and retires the confirmed own commands; the next frame
    /// re-derives the view.
    pub fn handle_confirmed(
        &mut self,
        now: Instant,
        turn: Turn,
        confirmed: &S,
        sections: &[SectionHash],
        own_chunks: usize,
    ) {
        if self.section_names.len() != sections.len()
            || self
                .section_names
                .iter()
                .zip(sections)
                .any(|(n, s)| *n != s.name)
        {
            self.section_names = sections.iter().map(|s| s.name.clone()).collect();
        }
        if let Some(probe) = self.probe.take().filter(|p| p.turn == turn) {
            self.compare(&probe, confirmed, sections);
        }
        for _ in 0..own_chunks {
            self.own.pop_front();
        }
        // Ours that were expected by now come later: in the next turn at the earliest.
        for p in &mut self.own {
            if p.turn <= turn {
                p.turn = turn.next();
            }
        }
        let forget = self.config.forget_after;
        let before = self.own.len();
        self.own.retain(|p| now.saturating_since(p.at) < forget);
        self.stats.forgotten += (before - self.own.len()) as u64;
        // The view is re-derived from the new confirmed world.
        self.base = None;
    }

    /// The confirmed world was replaced (a heal or a restored snapshot):
    /// forget the speculative world, keep the own commands.
    pub fn reset(&mut self) {
        self.base = None;
        self.probe = None;
        self.current = false;
    }

    /// One rendered frame at `now`: brings the speculative world up to
    /// `horizon` (the turn a command issued now would land in), within the
    /// budget measured with `clock`. `confirmed` is the confirmed world and
    /// `next` the first turn it has not simulated. Returns whether the view
    /// is speculative this frame (`false`: it falls back to the confirmed
    /// world).
    pub fn handle_frame(
        &mut self,
        now: Instant,
        confirmed: &S,
        next: Turn,
        horizon: Turn,
        clock: &mut dyn FnMut() -> Instant,
    ) -> bool {
        self.stats.frames += 1;
        for p in self.own.iter_mut().filter(|p| !p.shown) {
            p.frames = p.frames.saturating_add(1);
        }
        let own_last = self.own.back().map(|p| p.turn);
        let want = own_last.map_or(horizon, |t| t.max(horizon)).max(next);
        let cap = Turn(next.0.saturating_add(self.config.max_ahead.max(1) - 1));
        let target = want.min(cap);
        self.target = Some(target);
        self.current = false;
        let start = clock();
        // Each reading of the clock ends one piece of work and starts the
        // next: `last` is the latest.
        let mut last = start;
        if self.base != Some(next) || self.world.is_none() || self.hook.stale() {
            if !self.fits(Duration::ZERO, self.fork_cost.estimate()) {
                self.stats.fallbacks += 1;
                return false;
            }
            let forked = self.hook.fork(confirmed, &mut self.world);
            last = clock();
            self.fork_cost.record(last.saturating_since(start));
            self.stats.forks += 1;
            if !forked {
                self.base = None;
                self.stats.fallbacks += 1;
                return false;
            }
            self.base = Some(next);
            self.next = next;
            self.probe = None;
        }
        while self.next <= target {
            let spent = last.saturating_since(start);
            if !self.fits(spent, self.step_cost.estimate()) {
                self.stats.fallbacks += 1;
                return false;
            }
            let inputs = own_inputs(&self.own, self.next);
            let Some(world) = self.world.as_mut() else {
                self.stats.fallbacks += 1;
                return false;
            };
            self.hook.step(world, self.next, &inputs);
            self.stats.steps += 1;
            if self.next == next && self.config.count_corrections {
                if self.section_names.is_empty() {
                    self.section_names =
                        world.section_hashes().into_iter().map(|s| s.name).collect();
                }
                let hook = &mut self.hook;
                let sections = self
                    .section_names
                    .iter()
                    .map(|name| {
                        let (hashes, whole) = hook.probe(world, name);
                        (name.clone(), hashes, whole)
                    })
                    .collect();
                self.probe = Some(Probe {
                    turn: next,
                    sections,
                });
            }
            let after = clock();
            self.step_cost.record(after.saturating_since(last));
            last = after;
            self.next = self.next.next();
        }
        self.current = true;
        self.blocked = 0;
        let done = last;
        for p in self.own.iter_mut().filter(|p| p.turn <= target && !p.shown) {
            p.shown = true;
            self.stats.shown += 1;
            self.stats.shown_next_frame += u64::from(p.frames <= 1);
            self.stats.most_frames_to_show = self.stats.most_frames_to_show.max(p.frames);
            if self.feedback.len() >= FEEDBACK_SAMPLES {
                self.feedback.pop_front();
            }
            self.feedback
                .push_back(done.max(now).saturating_since(p.at));
        }
        true
    }

    /// Whether work estimated at `estimate` may start with `spent` of the
    /// frame's budget gone. Work that can never fit is let through once
    /// [`REMEASURE_AFTER`] frames kept it from starting, at the start of a
    /// frame: its cost may have been a passing one.
    fn fits(&mut self, spent: Duration, estimate: Duration) -> bool {
        let budget = self.config.budget;
        if spent + estimate <= budget {
            return true;
        }
        if estimate > budget {
            self.blocked += 1;
            if self.blocked > REMEASURE_AFTER && spent == Duration::ZERO {
                self.blocked = 0;
                return true;
            }
        }
        false
    }

    /// The speculative world if this frame's view is speculative, else
    /// `None` (draw the confirmed world).
    #[must_use]
    pub const fn world(&self) -> Option<&S> {
        if self.current {
            self.world.as_ref()
        } else {
            None
        }
    }

    /// What to draw this frame: the speculative world, or `confirmed` when
    /// the view fell back.
    #[must_use]
    pub fn view<'a>(&'a self, confirmed: &'a S) -> &'a S {
        self.world().unwrap_or(confirmed)
    }

    /// The last turn the speculative world has simulated when the view is
    /// speculative.
    #[must_use]
    pub fn view_turn(&self) -> Option<Turn> {
        self.current.then(|| Turn(self.next.0.saturating_sub(1)))
    }

    /// Counters so far.
    #[must_use]
    pub const fn stats(&self) -> SpeculationStats {
        self.stats
    }

    /// Own feedback: from each own command's submission to the end of the
    /// first frame that showed it, as (p50, p99); `None` before the first.
    #[must_use]
    pub fn feedback(&self) -> Option<(Duration, Duration)> {
        let mut v: Vec<Duration> = self.feedback.iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let at = |p: usize| v[((v.len() - 1) * p).div_ceil(100)];
        Some((at(50), at(99)))
    }

    /// Own commands not confirmed yet.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.own.len()
    }

    fn compare(&mut self, probe: &Probe, confirmed: &S, sections: &[SectionHash]) {
        self.stats.compared_turns += 1;
        let mut wrong: Vec<(String, u64)> = Vec::new();
        for s in sections {
            let (spec, whole) = probe
                .sections
                .iter()
                .find(|(n, _, _)| *n == s.name)
                .map_or((&[][..], true), |(_, e, whole)| (&e[..], *whole));
            if whole {
                if entities_match_section(spec, &s.hash) {
                    continue;
                }
                let conf = confirmed.entity_hashes(&s.name);
                wrong.extend(
                    diff_entities(spec, &conf)
                        .into_iter()
                        .map(|id| (s.name.clone(), id)),
                );
            } else if !spec.is_empty() {
                // Only the entities the view stepped: each must be in the
                // confirmed world with the same hash (lists sorted by id).
                let conf = confirmed.entity_hashes(&s.name);
                wrong.extend(
                    spec.iter()
                        .filter(|x| {
                            conf.binary_search_by_key(&x.id, |y| y.id)
                                .map_or(true, |k| conf[k].hash != x.hash)
                        })
                        .map(|x| (s.name.clone(), x.id)),
                );
            }
        }
        if wrong.is_empty() {
            self.streaks.clear();
            return;
        }
        self.stats.mispredicted_turns += 1;
        self.stats.corrections += wrong.len() as u64;
        let mut streaks = BTreeMap::new();
        for key in wrong {
            let n = self.streaks.get(&key).map_or(1, |n| n + 1);
            self.stats.max_correction_turns = self.stats.max_correction_turns.max(n);
            streaks.insert(key, n);
        }
        self.streaks = streaks;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap
    use super::*;
    use sim::game::{Command, World};

    const ME: PlayerId = PlayerId(0);

    fn world() -> World {
        sim::scenarios::skirmish(7)
    }

    /// A move of one of `player`'s units to a far corner.
    fn order(w: &World, player: PlayerId) -> Command {
        let unit = w
            .entities()
            .iter()
            .find(|e| e.owner == Some(player) && e.kind != sim::game::UnitKind::Base)
            .unwrap()
            .id;
        Command::Move {
            units: vec![unit],
            x: 3,
            y: 3,
        }
    }

    /// A virtual clock: every reading is `step` later than the one before,
    /// so work "costs" a known amount without reading a real clock.
    fn ticking(step: Duration) -> impl FnMut() -> Instant {
        let mut t = Instant::ZERO;
        move || {
            t += step;
            t
        }
    }

    fn stepped(
        mut w: World,
        turns: std::ops::RangeInclusive<u32>,
        at: Option<(u32, &Command)>,
    ) -> World {
        for t in turns {
            let inputs: Vec<Stamped<Command>> = at
                .filter(|(a, _)| *a == t)
                .map(|(_, c)| Stamped {
                    player: ME,
                    seq: 0,
                    command: c.clone(),
                })
                .into_iter()
                .collect();
            w.step(Turn(t), &inputs);
        }
        w
    }

    fn generous() -> SpeculationConfig {
        SpeculationConfig {
            budget: Duration::from_secs(1),
            ..SpeculationConfig::default()
        }
    }

    /// The frame right after a submit shows it: the speculative world is the
    /// confirmed one stepped over the unconfirmed turns with the own command
    /// at its landing turn and nothing from anyone else.
    #[test]
    fn an_own_command_is_in_the_speculative_world_at_the_next_frame() {
        let confirmed = world();
        let cmd = order(&confirmed, ME);
        let mut spec = Speculation::<World>::new(generous());
        let mut clock = ticking(Duration::from_micros(10));
        assert!(spec.handle_frame(Instant::ZERO, &confirmed, Turn(0), Turn(2), &mut clock));
        let without = stepped(confirmed.clone(), 0..=2, None);
        assert_eq!(spec.world().unwrap().state_hash(), without.state_hash());

        let click = Instant::from_millis(5);
        spec.handle_submit(click, ME, Turn(2), vec![cmd.clone()]);
        assert!(spec.handle_frame(
            Instant::from_millis(16),
            &confirmed,
            Turn(0),
            Turn(2),
            &mut clock
        ));
        let with = stepped(confirmed.clone(), 0..=2, Some((2, &cmd)));
        assert_eq!(spec.view(&confirmed).state_hash(), with.state_hash());
        assert_ne!(with.state_hash(), without.state_hash());
        assert_eq!(spec.stats().shown, 1);
        let (p50, _) = spec.feedback().unwrap();
        assert!(p50 >= Duration::from_millis(11));
    }

    /// The confirmed world is only read: stepping it with speculation
    /// running beside it (own commands, forks, frames, corrections) gives
    /// the same hash every turn as stepping it alone.
    #[test]
    fn the_confirmed_stream_is_the_same_with_and_without_speculation() {
        let base = world();
        let mine = order(&base, ME);
        let theirs = order(&base, PlayerId(1));
        let inputs = |t: u32| -> Vec<Stamped<Command>> {
            let mut v = Vec::new();
            if t % 3 == 0 {
                v.push(Stamped {
                    player: ME,
                    seq: 0,
                    command: mine.clone(),
                });
            }
            if t % 5 == 0 {
                v.push(Stamped {
                    player: PlayerId(1),
                    seq: 0,
                    command: theirs.clone(),
                });
            }
            v
        };
        let mut alone = base.clone();
        let mut watched = base.clone();
        let mut spec = Speculation::<World>::with_hook(generous(), CloneFork);
        let mut clock = ticking(Duration::from_micros(10));
        for t in 0..40u32 {
            let now = Instant::from_millis(u64::from(t) * 100);
            if t % 3 == 2 {
                spec.handle_submit(now, ME, Turn(t + 1), vec![mine.clone()]);
            }
            spec.handle_frame(now, &watched, Turn(t), Turn(t + 3), &mut clock);
            let i = inputs(t);
            alone.step(Turn(t), &i);
            watched.step(Turn(t), &i);
            let ours = i.iter().filter(|s| s.player == ME).count();
            spec.handle_confirmed(now, Turn(t), &watched, &watched.section_hashes(), ours);
            assert_eq!(alone.state_hash(), watched.state_hash(), "turn {t}");
        }
        assert!(spec.stats().compared_turns > 30);
    }

    /// Over budget the view falls back to the confirmed world for that
    /// frame; the derivation resumes where it stopped and the view recovers
    /// by itself, and no frame's measured work passes the budget.
    #[test]
    fn over_budget_falls_back_then_recovers() {
        let confirmed = world();
        let budget = Duration::from_millis(4);
        let mut spec = Speculation::<World>::new(SpeculationConfig {
            budget,
            count_corrections: false,
            ..SpeculationConfig::default()
        });
        // Every clock reading is 1 ms later: a fork or a step "costs" 1 ms.
        let mut t = Instant::ZERO;
        let mut views = Vec::new();
        for frame in 0..10u64 {
            let mut spent = Duration::ZERO;
            let mut clock = || {
                t += Duration::from_millis(1);
                spent += Duration::from_millis(1);
                t
            };
            let now = Instant::from_millis(frame * 17);
            let speculative = spec.handle_frame(now, &confirmed, Turn(0), Turn(7), &mut clock);
            views.push(speculative);
            // The last reading may be the one that found the budget spent.
            assert!(
                spent <= budget + Duration::from_millis(1),
                "frame {frame}: {spent}"
            );
            if !speculative {
                assert!(spec.world().is_none());
                assert_eq!(spec.view(&confirmed).state_hash(), confirmed.state_hash());
            }
        }
        assert!(!views[0], "eight turns do not fit in one frame");
        assert!(views.iter().any(|v| *v), "{views:?}");
        let first = views.iter().position(|v| *v).unwrap();
        assert!(views[first..].iter().all(|v| *v), "{views:?}");
        assert_eq!(spec.stats().fallbacks, first as u64);
        let reference = stepped(confirmed.clone(), 0..=7, None);
        assert_eq!(spec.world().unwrap().state_hash(), reference.state_hash());
    }

    /// No death spiral: while every step costs more than the whole budget,
    /// no frame's work grows past the budget plus one step (however long it
    /// lasts, and though the target keeps moving ahead), the confirmed view
    /// is shown; once steps are cheap again the view comes back by itself.
    #[test]
    fn steps_dearer_than_the_budget_never_spiral_and_the_view_recovers() {
        let mut confirmed = world();
        let budget = Duration::from_millis(4);
        let mut spec = Speculation::<World>::with_hook(
            SpeculationConfig {
                budget,
                count_corrections: false,
                ..SpeculationConfig::default()
            },
            CloneFork,
        );
        let mut t = Instant::ZERO;
        let mut next = Turn(0);
        let mut worst = Duration::ZERO;
        let mut over = 0;
        for frame in 0..300u64 {
            // 5 ms a reading for the first 200 frames (a fork or a step
            // costs more than the budget), then 0.1 ms.
            let cost = if frame < 200 { 5_000 } else { 100 };
            let mut readings = 0u64;
            let mut clock = || {
                t += Duration::from_micros(cost);
                readings += 1;
                t
            };
            let now = Instant::from_millis(frame * 17);
            if frame % 6 == 5 {
                confirmed.step(next, &[]);
                let sections = confirmed.section_hashes();
                spec.handle_confirmed(now, next, &confirmed, &sections, 0);
                next = next.next();
            }
            let shown = spec.handle_frame(now, &confirmed, next, Turn(next.0 + 3), &mut clock);
            // The work between the frame's first and last reading.
            let spent = Duration::from_micros(cost * readings.saturating_sub(1));
            worst = worst.max(spent);
            if frame < 200 {
                assert!(!shown, "frame {frame}");
                over += u32::from(spent > budget);
            }
            assert!(
                spent <= budget + Duration::from_micros(cost),
                "frame {frame}: {spent}"
            );
        }
        assert!(spec.world().is_some(), "the view recovered");
        assert!(worst <= budget + Duration::from_millis(5), "{worst}");
        // Work that never fits (the fork and a step) is tried again once
        // every REMEASURE_AFTER frames: at most two frames in that many pass
        // the budget, each by one piece of work.
        let cycles = 200 / (REMEASURE_AFTER + 1) + 1;
        assert!(over <= 2 * cycles, "{over} frames over budget");
    }

    /// A command of another player (predicted as none) mispredicts the
    /// entities it moves; a turn that went as predicted corrects nothing.
    #[test]
    fn corrections_count_the_entities_another_players_command_changed() {
        let mut spec = Speculation::<World>::new(generous());
        six_turns_with_their_move(&mut spec, |t, s| {
            assert_eq!(s.compared_turns, u64::from(t) + 1);
            if t < 3 {
                assert_eq!(s.corrections, 0, "turn {t}");
            } else {
                assert!(s.corrections >= 1, "turn {t}");
            }
        });
        assert_eq!(spec.stats().mispredicted_turns, 1);
        assert_eq!(spec.stats().max_correction_turns, 1);
    }

    /// Six turns of the skirmish confirmed one by one, with a move of
    /// player 1's (predicted as none) at turn 3, a frame before each; `each`
    /// sees the stats after each turn.
    fn six_turns_with_their_move(
        spec: &mut Speculation<World>,
        mut each: impl FnMut(u32, SpeculationStats),
    ) {
        let mut confirmed = world();
        let theirs = order(&confirmed, PlayerId(1));
        let mut clock = ticking(Duration::from_micros(10));
        for t in 0..6u32 {
            spec.handle_frame(Instant::ZERO, &confirmed, Turn(t), Turn(t + 2), &mut clock);
            let inputs = if t == 3 {
                vec![Stamped {
                    player: PlayerId(1),
                    seq: 0,
                    command: theirs.clone(),
                }]
            } else {
                Vec::new()
            };
            confirmed.step(Turn(t), &inputs);
            let sections = confirmed.section_hashes();
            spec.handle_confirmed(Instant::ZERO, Turn(t), &confirmed, &sections, 0);
            each(t, spec.stats());
        }
    }

    /// With prediction culling, only the entities on screen are compared:
    /// another player's command off screen corrects nothing, the same
    /// command on screen is counted as without culling.
    #[test]
    fn a_culled_view_counts_corrections_on_screen_only() {
        use sim::game::TileRect;
        let base = world();
        let theirs = order(&base, PlayerId(1));
        let Command::Move { units, .. } = &theirs else {
            unreachable!("order() makes a move")
        };
        let tile_of = |pred: &dyn Fn(&sim::game::Entity) -> bool| {
            base.entities().iter().find(|e| pred(e)).unwrap().pos.tile()
        };
        let moved = tile_of(&|e| e.id == units[0]);
        let mine = tile_of(&|e| e.owner == Some(ME) && e.kind == sim::game::UnitKind::Base);
        let corrections = |screen: (u16, u16)| {
            let area = ViewArea::new(Some(TileRect::around(screen.0, screen.1, 12, 12)));
            let mut spec = Speculation::<World>::with_hook(generous(), CullToArea::new(area));
            six_turns_with_their_move(&mut spec, |_, _| {});
            assert_eq!(spec.stats().compared_turns, 6);
            spec.stats().corrections
        };
        assert_eq!(corrections(mine), 0, "the move was off screen");
        assert!(corrections(moved) >= 1, "the move was on screen");
    }

    /// The camera moving forks the view again at the next frame; a still
    /// camera does not.
    #[test]
    fn a_culled_view_forks_again_when_the_camera_moves() {
        use sim::game::TileRect;
        let confirmed = world();
        let area = ViewArea::new(Some(TileRect::around(10, 10, 12, 12)));
        let mut spec = Speculation::<World>::with_hook(generous(), CullToArea::new(area.clone()));
        let mut clock = ticking(Duration::from_micros(10));
        let mut frame = |spec: &mut Speculation<World>| {
            assert!(spec.handle_frame(Instant::ZERO, &confirmed, Turn(0), Turn(2), &mut clock));
            spec.stats().forks
        };
        assert_eq!(frame(&mut spec), 1);
        assert_eq!(frame(&mut spec), 1, "a still camera");
        area.set(Some(TileRect::around(30, 30, 12, 12)));
        assert_eq!(frame(&mut spec), 2, "the camera moved");
        assert_eq!(frame(&mut spec), 2);
    }

    /// A command whose input the relay refused leaves the view at the next
    /// frame, and the next confirmed own chunk retires the command it
    /// carries, not the refused one.
    #[test]
    fn a_refused_command_leaves_the_view_and_the_next_chunk_retires_its_own() {
        let confirmed = world();
        let cmd = order(&confirmed, ME);
        let mut spec = Speculation::<World>::new(generous());
        let mut clock = ticking(Duration::from_micros(10));
        let (refused, kept) = (Instant::from_millis(5), Instant::from_millis(6));
        spec.handle_submit(refused, ME, Turn(1), vec![cmd.clone()]);
        spec.handle_submit(kept, ME, Turn(2), vec![cmd.clone()]);
        assert!(spec.handle_frame(
            Instant::from_millis(16),
            &confirmed,
            Turn(0),
            Turn(2),
            &mut clock
        ));
        let both = stepped(confirmed.clone(), 0..=2, Some((1, &cmd)));
        assert_eq!(spec.view(&confirmed).state_hash(), both.state_hash());

        spec.handle_refused(&[refused, Instant::from_millis(99)]);
        assert_eq!((spec.pending(), spec.stats().refused), (1, 1));
        assert!(spec.handle_frame(
            Instant::from_millis(32),
            &confirmed,
            Turn(0),
            Turn(2),
            &mut clock
        ));
        let kept_only = stepped(confirmed.clone(), 0..=2, Some((2, &cmd)));
        assert_eq!(spec.view(&confirmed).state_hash(), kept_only.state_hash());
        assert_ne!(kept_only.state_hash(), both.state_hash());

        // The kept command's chunk arrives: nothing is left pending.
        let mut next = confirmed.clone();
        next.step(Turn(0), &[]);
        spec.handle_confirmed(
            Instant::from_millis(40),
            Turn(0),
            &next,
            &next.section_hashes(),
            1,
        );
        assert_eq!(spec.pending(), 0);
    }
}
