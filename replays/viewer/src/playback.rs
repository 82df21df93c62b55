//! Playing a recording: the world at the shown turn, stepping forward,
//! seeking to any turn, and a background pass (the index) that simulates the
//! whole match once, a slice per frame, checking every recorded hash and
//! leaving a snapshot every [`KEY_EVERY`] turns so a seek never simulates
//! more than that many turns.
//!
//! All stepping goes through [`replays::Replayer`], the code `replay verify`
//! runs, so what the page shows is what native verification computed.

use crate::View;
use crate::recording::Recording;
use crate::scene::{Figures, Scene};
use replays::{ReplayError, Replayer, restore_checked};
use serde_json::{Value, json};
use sim::{Simulation, StateHash, Turn};
use std::collections::BTreeMap;

/// Turns between two snapshots the index keeps (a seek simulates fewer).
pub const KEY_EVERY: u32 = 50;

/// Turns between two samples of the per-player figures.
pub const SAMPLE_EVERY: u32 = 10;

/// The background pass over the whole match.
struct Index<S: Simulation> {
    rp: Replayer<S>,
    /// Next turn record to apply.
    next: usize,
    /// Every simulated turn's hash, in order.
    hashes: Vec<(Turn, StateHash)>,
    /// Recorded hashes the pass compared, and the first that differed.
    checked: u32,
    first_mismatch: Option<(Turn, StateHash, StateHash)>,
    /// Figures sampled every [`SAMPLE_EVERY`] turns.
    samples: Vec<(Turn, Figures)>,
    error: Option<String>,
}

/// A recording being played: `S` is its game.
pub struct Playback<S: Scene> {
    bytes: Vec<u8>,
    rec: Recording,
    /// The shown world, after `rp.current()`.
    rp: Replayer<S>,
    /// Next turn record to apply to `rp`.
    next: usize,
    /// Snapshots the index left: turn -> (hash, bytes).
    cache: BTreeMap<Turn, (StateHash, Vec<u8>)>,
    index: Index<S>,
}

impl<S: Scene> Playback<S> {
    /// Opens `bytes` (a recording of game `S`, already parsed into `rec`) at
    /// the world before the first turn.
    ///
    /// # Errors
    /// The recording is of another game, or its start record does not restore.
    pub fn new(bytes: Vec<u8>, rec: Recording) -> Result<Self, ReplayError> {
        let rp = fresh::<S>(&rec)?;
        let index = Index {
            rp: fresh::<S>(&rec)?,
            next: 0,
            hashes: Vec::new(),
            checked: 0,
            first_mismatch: None,
            samples: Vec::new(),
            error: None,
        };
        Ok(Self {
            bytes,
            rec,
            rp,
            next: 0,
            cache: BTreeMap::new(),
            index,
        })
    }

    /// The world shown now.
    #[must_use]
    pub fn world(&self) -> &S {
        self.rp.world()
    }

    /// The recording.
    #[must_use]
    pub const fn recording(&self) -> &Recording {
        &self.rec
    }

    /// Every turn's hash the index computed so far, in turn order.
    #[must_use]
    pub fn indexed_hashes(&self) -> &[(Turn, StateHash)] {
        &self.index.hashes
    }

    /// Takes `more` bytes of the same recording (a live view's next records)
    /// and reads the records they complete; what is shown stays where it is.
    ///
    /// # Errors
    /// The bytes do not continue this recording, or its first keyframe
    /// does not restore.
    pub fn append(&mut self, more: &[u8]) -> Result<(), ReplayError> {
        self.bytes.extend_from_slice(more);
        self.rec.extend(&self.bytes)?;
        // Nothing stepped yet: the start may have arrived only now (a late
        // joiner's keyframe), so both worlds start again from it.
        if self.next == 0 && self.index.next == 0 && self.index.hashes.is_empty() {
            self.rp = fresh::<S>(&self.rec)?;
            self.index.rp = fresh::<S>(&self.rec)?;
        }
        Ok(())
    }

    fn step_next(&mut self) -> Result<bool, ReplayError> {
        let Some((turn, inputs)) = self.rec.turns.get(self.next) else {
            return Ok(false);
        };
        self.rp.step(*turn, inputs, |_, _| {})?;
        self.next += 1;
        Ok(true)
    }
}

/// A replayer at the start of the recording: the match's start (a
/// scenario's start record applied), or, for a recording that begins in the
/// middle of a match (a live view that joined late: a keyframe before any
/// turn record), that keyframe.
fn fresh<S: Simulation>(rec: &Recording) -> Result<Replayer<S>, ReplayError> {
    if rec.start.is_none()
        && let Some((&t, (hash, snapshot))) = rec.keyframes.first_key_value()
        && rec.turns.first().is_none_or(|(first, _)| *first > t)
    {
        let world = restore_checked::<S>(t, snapshot, *hash)?;
        return Ok(Replayer::from_world(
            world,
            t.0 + 1,
            rec.header.setup.players,
        ));
    }
    let mut rp = Replayer::<S>::start(&rec.header)?;
    if let Some((hash, snapshot)) = &rec.start {
        rp.begin_from(snapshot, *hash)?;
    }
    Ok(rp)
}

fn hex(h: StateHash) -> String {
    h.to_hex()
}

impl<S: Scene> View for Playback<S> {
    fn info(&self) -> Value {
        let mut info = self.rec.info_json();
        if let Value::Object(map) = &mut info {
            let sections: Vec<String> = self
                .world()
                .section_hashes()
                .into_iter()
                .map(|s| s.name)
                .collect();
            map.insert("sections".into(), json!(sections));
            let mut probe = Vec::new();
            self.world().draw(&mut probe);
            map.insert("drawable".into(), json!(!probe.is_empty()));
        }
        info
    }

    fn seek(&mut self, target: u32) -> Result<(), ReplayError> {
        let target = Turn(target);
        // The nearest known state at or before the target: the shown world,
        // a snapshot the index left, or a keyframe of the file.
        let current = self.rp.current().filter(|t| *t <= target);
        // Borrowed, not copied: only the one restored is read.
        let cached = self.cache.range(..=target).next_back();
        let keyframe = self.rec.keyframes.range(..=target).next_back();
        let best = [cached, keyframe]
            .into_iter()
            .flatten()
            .max_by_key(|(t, _)| **t);
        match (current, best) {
            (Some(c), Some((t, _))) if c >= *t => {}
            (_, Some((&t, (hash, snapshot)))) => {
                let world = restore_checked::<S>(t, snapshot, *hash)?;
                self.rp = Replayer::from_world(world, t.0 + 1, self.rec.header.setup.players);
                self.next = self.rec.first_after(Some(t));
            }
            (Some(_), None) => {}
            (None, None) => {
                self.rp = fresh::<S>(&self.rec)?;
                self.next = 0;
            }
        }
        while self
            .rec
            .turns
            .get(self.next)
            .is_some_and(|(t, _)| *t <= target)
        {
            self.step_next()?;
        }
        Ok(())
    }

    fn advance(&mut self) -> Result<bool, ReplayError> {
        self.step_next()
    }

    fn append(&mut self, more: &[u8]) -> Result<(), ReplayError> {
        Self::append(self, more)
    }

    fn state(&self) -> Value {
        let turn = self.rp.current();
        let hash = self.world().state_hash();
        let recorded = turn.and_then(|t| self.rec.hashes.get(&t).copied());
        json!({
            "turn": turn.map(|t| t.0),
            "hash": hex(hash),
            "recorded": recorded.map(hex),
            "matches": recorded.map(|r| r == hash),
            "at_end": self.next >= self.rec.turns.len(),
        })
    }

    fn draw(&self, out: &mut Vec<i32>) {
        self.world().draw(out);
    }

    fn index(&mut self, turns: u32) -> bool {
        let idx = &mut self.index;
        if idx.error.is_some() {
            return true;
        }
        for _ in 0..turns {
            let Some((turn, inputs)) = self.rec.turns.get(idx.next) else {
                return true;
            };
            let (hashes, cache, samples) = (&mut idx.hashes, &mut self.cache, &mut idx.samples);
            let (recorded, checked, mismatch) =
                (&self.rec.hashes, &mut idx.checked, &mut idx.first_mismatch);
            let stepped = idx.rp.step(*turn, inputs, |t, world| {
                let hash = world.state_hash();
                hashes.push((t, hash));
                if let Some(&r) = recorded.get(&t) {
                    *checked += 1;
                    if r != hash && mismatch.is_none() {
                        *mismatch = Some((t, r, hash));
                    }
                }
                if t.0 % KEY_EVERY == KEY_EVERY - 1 {
                    cache.insert(t, (hash, world.snapshot()));
                }
                if t.0 % SAMPLE_EVERY == 0 {
                    samples.push((t, world.figures()));
                }
            });
            if let Err(e) = stepped {
                idx.error = Some(e.to_string());
                return true;
            }
            idx.next += 1;
        }
        idx.next >= self.rec.turns.len()
    }

    fn index_state(&self) -> Value {
        let idx = &self.index;
        json!({
            "done": idx.next >= self.rec.turns.len() || idx.error.is_some(),
            "turn_records": idx.next,
            "turns": idx.hashes.len(),
            "hashes_checked": idx.checked,
            "first_mismatch": idx.first_mismatch.map(|(t, r, h)| json!({"turn": t.0, "recorded": hex(r), "computed": hex(h)})),
            "error": idx.error,
        })
    }

    fn index_hashes(&self, from: usize) -> Value {
        Value::Array(
            self.index
                .hashes
                .iter()
                .skip(from)
                .map(|(t, h)| json!({"turn": t.0, "hash": hex(*h)}))
                .collect(),
        )
    }

    fn figures(&self) -> Value {
        let names: Vec<&str> = self
            .index
            .samples
            .first()
            .map(|(_, f)| f.iter().map(|(n, _)| *n).collect())
            .unwrap_or_default();
        json!({
            "names": names,
            "samples": self.index.samples.iter().map(|(t, f)| json!({
                "turn": t.0,
                "values": f.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }

    fn entities(&self, section: &str, limit: usize) -> Value {
        let world = self.world();
        let list = world.entity_hashes(section);
        json!({
            "section": section,
            "count": list.len(),
            "entities": list.iter().take(limit).map(|e| json!({
                "id": e.id,
                "hash": hex(e.hash),
                "fields": world.entity_fields(section, e.id).map(|fs| fs.iter().map(|f| json!([f.path, f.value])).collect::<Vec<_>>()),
            })).collect::<Vec<_>>(),
        })
    }

    fn verify(&self) -> Value {
        let mut turn_hashes = Vec::new();
        let report = Reader::from_bytes(&self.bytes).and_then(|reader| {
            replays::verify::<S, _>(reader, |p| {
                turn_hashes.push(json!({"turn": p.turn.0, "hash": hex(p.hash)}))
            })
        });
        match report {
            Ok(r) => json!({
                "verified": r.verified(),
                "turns": r.turns,
                "final_hash": r.final_hash.map(hex),
                "turn_hashes": turn_hashes,
            }),
            Err(e) => {
                json!({"verified": false, "error": e.to_string(), "turn_hashes": turn_hashes})
            }
        }
    }
}

use replays::Reader;

#[cfg(test)]
mod tests {
    use crate::open;
    use serde_json::Value;
    use std::path::Path;

    fn fixture(name: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/data")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn hashes(v: &Value) -> Vec<(u64, String)> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|x| {
                        (
                            x["turn"].as_u64().unwrap_or(u64::MAX),
                            x["hash"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The background pass, seeking from its snapshots (forward and back),
    /// and stepping all give the hashes `replays::verify` computes.
    #[test]
    fn seek_step_and_index_agree_with_verify() {
        for name in [
            "relay_economy_4p.replay",
            "peer_arena_3p.replay",
            "peer_skirmish_2p.replay",
        ] {
            let mut view = open(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let verified = view.verify();
            assert_eq!(verified["verified"], Value::Bool(true), "{name}");
            let expected = hashes(&verified["turn_hashes"]);
            assert!(expected.len() > 100, "{name}: {} turns", expected.len());
            while !view.index(7) {}
            assert_eq!(
                hashes(&view.index_hashes(0)),
                expected,
                "{name}: index pass"
            );
            assert!(view.index_state()["first_mismatch"].is_null(), "{name}");
            // Far forward, back before a snapshot, then next to it.
            for &i in &[expected.len() - 1, 3, 120, 60, 61] {
                let (turn, hash) = &expected[i];
                view.seek(u32::try_from(*turn).unwrap_or(0))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                let state = view.state();
                assert_eq!(state["turn"].as_u64(), Some(*turn), "{name}");
                assert_eq!(
                    state["hash"].as_str(),
                    Some(hash.as_str()),
                    "{name}: seek to {turn}"
                );
            }
            view.seek(0).unwrap_or_else(|e| panic!("{e}"));
            assert!(view.advance().unwrap_or(false));
            assert_eq!(
                view.state()["hash"].as_str(),
                Some(expected[1].1.as_str()),
                "{name}: step"
            );
            let mut shapes = Vec::new();
            view.draw(&mut shapes);
            assert!(
                shapes.len() > 7 * 4 && shapes.len() % crate::scene::SHAPE_LEN == 0,
                "{name}: {} ints",
                shapes.len()
            );
            assert_eq!(shapes[0], crate::scene::Shape::Bounds as i32);
        }
    }

    /// A live view: a recording that starts at a keyframe in the middle of
    /// the match (a late spectator's), arriving in pieces that cut records
    /// anywhere, plays from that keyframe and its background pass computes
    /// the same hashes as verifying the whole match.
    #[test]
    fn a_late_joiners_recording_appended_in_pieces_hashes_as_native() {
        use replays::{Replayer, Writer};
        use sim::Simulation;
        let name = "peer_skirmish_2p.replay";
        let bytes = fixture(name);
        let whole = open(bytes.clone()).unwrap_or_else(|e| panic!("{e}"));
        let expected = hashes(&whole.verify()["turn_hashes"]);
        let rec = crate::Recording::parse(&bytes).unwrap_or_else(|e| panic!("{e}"));
        let join = 40;
        let mut rp =
            Replayer::<sim::game::World>::start(&rec.header).unwrap_or_else(|e| panic!("{e}"));
        if let Some((hash, snapshot)) = &rec.start {
            rp.begin_from(snapshot, *hash)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        for (turn, inputs) in rec.turns.iter().filter(|(t, _)| t.0 <= join) {
            rp.step(*turn, inputs, |_, _| {})
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let world = rp.world();
        let mut w = Writer::new(Vec::new(), &rec.header, replays::DEFAULT_SYNC)
            .unwrap_or_else(|e| panic!("{e}"));
        w.record_keyframe(sim::Turn(join), &world.snapshot(), world.state_hash())
            .unwrap_or_else(|e| panic!("{e}"));
        for (turn, inputs) in rec.turns.iter().filter(|(t, _)| t.0 > join) {
            w.record_turn(*turn, inputs)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let live = w.into_inner().unwrap_or_else(|e| panic!("{e}"));
        // The header alone first, then pieces of 777 bytes.
        let first = 200.min(live.len());
        let mut view = open(live[..first].to_vec()).unwrap_or_else(|e| panic!("{e}"));
        for piece in live[first..].chunks(777) {
            view.append(piece).unwrap_or_else(|e| panic!("{e}"));
            view.index(5);
        }
        while !view.index(50) {}
        let want: Vec<(u64, String)> = expected
            .into_iter()
            .filter(|(t, _)| *t > u64::from(join))
            .collect();
        assert!(want.len() > 50, "{} turns after the join", want.len());
        let got = hashes(&view.index_hashes(0));
        assert_eq!(got.len(), want.len(), "turns of the index pass");
        assert!(
            got == want,
            "index pass: first {:?}, want {:?}",
            got[0],
            want[0]
        );
        assert_eq!(
            hashes(&view.index_hashes(want.len() - 2)),
            want[want.len() - 2..]
        );
        // Seeking before the keyframe shows the keyframe's turn; after it, the turn.
        view.seek(3).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(view.state()["turn"].as_u64(), Some(u64::from(join)));
        let (turn, hash) = &want[want.len() / 2];
        view.seek(u32::try_from(*turn).unwrap_or(0))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(view.state()["hash"].as_str(), Some(hash.as_str()));
        assert!(
            view.append(b"garbage that does not continue the chain")
                .is_ok()
        );
        assert!(
            view.info()["ending"]
                .as_str()
                .is_some_and(|e| e.starts_with("damaged")),
            "{}",
            view.info()["ending"]
        );
    }

    /// A recording cut in the middle still opens with what it holds.
    #[test]
    fn a_cut_recording_opens_with_what_it_holds() {
        let bytes = fixture("relay_economy_4p.replay");
        let cut = bytes[..bytes.len() / 2].to_vec();
        let view = open(cut).unwrap_or_else(|e| panic!("{e}"));
        let info = view.info();
        assert!(info["turn_records"].as_u64().unwrap_or(0) > 10);
        assert_ne!(info["ending"], "complete");
        assert!(open(b"not a recording".to_vec()).is_err());
    }
}
