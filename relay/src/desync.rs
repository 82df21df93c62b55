//! Hash comparison: collects each player's `hash(T)`, decides agreement or a
//! desync as soon as every expected report for `T` is in, names the odd
//! players by majority (and says honestly when there is none, e.g. with two
//! players), and diffs section hashes to say which parts of the world differ.

use sim::{PlayerId, SectionHash, StateHash, Turn};
use std::collections::BTreeMap;

/// The relay's conclusion for one turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every reporter had this hash.
    Agreed(StateHash),
    /// Reports differ.
    Desync {
        /// Each reporter's hash.
        hashes: Vec<(PlayerId, StateHash)>,
        /// Players outside a strict majority; empty if there is no majority.
        odd: Vec<PlayerId>,
        /// A player holding the majority hash, if any.
        majority_member: Option<PlayerId>,
    },
}

/// Compares a complete set of reports.
pub(crate) fn judge(reports: &[(PlayerId, StateHash)]) -> Option<Verdict> {
    let first = reports.first()?.1;
    if reports.iter().all(|(_, h)| *h == first) {
        return Some(Verdict::Agreed(first));
    }
    let mut groups: BTreeMap<StateHash, Vec<PlayerId>> = BTreeMap::new();
    for (p, h) in reports {
        groups.entry(*h).or_default().push(*p);
    }
    let majority = groups
        .iter()
        .find(|(_, members)| members.len() * 2 > reports.len())
        .map(|(h, members)| (*h, members.first().copied()));
    let (odd, majority_member) = match majority {
        Some((h, member)) => (
            reports
                .iter()
                .filter(|(_, rh)| *rh != h)
                .map(|(p, _)| *p)
                .collect(),
            member,
        ),
        None => (Vec::new(), None),
    };
    Some(Verdict::Desync {
        hashes: reports.to_vec(),
        odd,
        majority_member,
    })
}

/// Names of sections whose hashes differ between any of the given reports;
/// a section missing from one report counts as differing.
pub(crate) fn differing_sections(reports: &[(PlayerId, Vec<SectionHash>)]) -> Vec<String> {
    let mut by_name: BTreeMap<&str, Vec<Option<StateHash>>> = BTreeMap::new();
    for (i, (_, sections)) in reports.iter().enumerate() {
        for s in sections {
            let slot = by_name
                .entry(s.name.as_str())
                .or_insert_with(|| vec![None; reports.len()]);
            slot[i] = Some(s.hash);
        }
    }
    let mut out: Vec<(usize, String)> = Vec::new();
    // Keep the first report's section order (world order), then the rest by name.
    let order = |name: &str| {
        reports
            .first()
            .and_then(|(_, s)| s.iter().position(|x| x.name == name))
            .unwrap_or(usize::MAX)
    };
    for (name, hashes) in by_name {
        let first = hashes[0];
        if hashes.iter().any(|h| *h != first || h.is_none()) {
            out.push((order(name), name.to_owned()));
        }
    }
    out.sort();
    out.into_iter().map(|(_, n)| n).collect()
}

/// Hash reports of recent turns, waiting for every expected player.
#[derive(Debug, Default)]
pub(crate) struct HashBook {
    turns: BTreeMap<Turn, BTreeMap<PlayerId, StateHash>>,
    /// Every turn up to this one has been judged.
    judged_through: Option<Turn>,
}

impl HashBook {
    /// A book that takes reports from the turn after `turn` on (a match
    /// resumed after a relay restart: earlier turns count as judged).
    pub(crate) fn judged_through(turn: Option<Turn>) -> Self {
        Self {
            turns: BTreeMap::new(),
            judged_through: turn,
        }
    }

    /// Records a report; false if it is stale, duplicate or the book is full.
    pub(crate) fn report(
        &mut self,
        turn: Turn,
        player: PlayerId,
        hash: StateHash,
        max_turns: usize,
    ) -> bool {
        if self.judged_through.is_some_and(|j| turn <= j) {
            return false;
        }
        if !self.turns.contains_key(&turn) && self.turns.len() >= max_turns {
            return false;
        }
        let entry = self.turns.entry(turn).or_default();
        if entry.contains_key(&player) {
            return false;
        }
        entry.insert(player, hash);
        true
    }

    /// Judges the oldest pending turns, in order, whose expected reports are
    /// all in; `expected(turn)` lists who must report. With `force`, the
    /// oldest turn is judged with whatever arrived (used when the book is full
    /// or the match ends).
    pub(crate) fn judge_ready(
        &mut self,
        expected: impl Fn(Turn) -> Vec<PlayerId>,
        force: bool,
    ) -> Vec<(Turn, Verdict)> {
        let mut out = Vec::new();
        while let Some((&turn, reports)) = self.turns.first_key_value() {
            let want = expected(turn);
            let complete = want.iter().all(|p| reports.contains_key(p));
            if !complete && !force {
                break;
            }
            let list: Vec<(PlayerId, StateHash)> = reports
                .iter()
                .filter(|(p, _)| want.contains(p) || complete)
                .map(|(p, h)| (*p, *h))
                .collect();
            self.turns.remove(&turn);
            self.judged_through = Some(turn);
            if let Some(v) = judge(&list) {
                out.push((turn, v));
            }
            if force {
                break;
            }
        }
        out
    }

    /// Every turn up to this one has been judged.
    pub(crate) const fn judged_up_to(&self) -> Option<Turn> {
        self.judged_through
    }

    /// Number of turns waiting for reports.
    pub(crate) fn pending(&self) -> usize {
        self.turns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(b: u8) -> StateHash {
        StateHash([b; 32])
    }

    #[test]
    fn majority_names_the_odd_one() {
        let v = judge(&[
            (PlayerId(0), h(1)),
            (PlayerId(1), h(2)),
            (PlayerId(2), h(1)),
        ]);
        assert_eq!(
            v,
            Some(Verdict::Desync {
                hashes: vec![
                    (PlayerId(0), h(1)),
                    (PlayerId(1), h(2)),
                    (PlayerId(2), h(1))
                ],
                odd: vec![PlayerId(1)],
                majority_member: Some(PlayerId(0)),
            })
        );
    }

    #[test]
    fn two_players_cannot_tell() {
        let Some(Verdict::Desync { odd, .. }) = judge(&[(PlayerId(0), h(1)), (PlayerId(1), h(2))])
        else {
            panic!("expected a desync");
        };
        assert!(odd.is_empty());
        assert_eq!(
            judge(&[(PlayerId(0), h(3)), (PlayerId(1), h(3))]),
            Some(Verdict::Agreed(h(3)))
        );
    }

    #[test]
    fn sections_diff_by_name() {
        let s = |n: &str, b: u8| SectionHash {
            name: n.into(),
            hash: h(b),
        };
        let d = differing_sections(&[
            (
                PlayerId(0),
                vec![s("globals", 1), s("units 0..64", 2), s("units 64..128", 3)],
            ),
            (
                PlayerId(1),
                vec![s("globals", 1), s("units 0..64", 9), s("units 64..128", 3)],
            ),
        ]);
        assert_eq!(d, vec!["units 0..64".to_owned()]);
    }

    #[test]
    fn book_judges_in_order_when_complete() {
        let mut b = HashBook::default();
        let all = |_| vec![PlayerId(0), PlayerId(1)];
        assert!(b.report(Turn(1), PlayerId(0), h(1), 8));
        assert!(b.report(Turn(0), PlayerId(0), h(0), 8));
        assert!(!b.report(Turn(0), PlayerId(0), h(0), 8));
        assert!(b.judge_ready(all, false).is_empty());
        assert!(b.report(Turn(1), PlayerId(1), h(1), 8));
        // Turn 0 still waits for player 1, so turn 1 waits too.
        assert!(b.judge_ready(all, false).is_empty());
        assert!(b.report(Turn(0), PlayerId(1), h(0), 8));
        let v = b.judge_ready(all, false);
        assert_eq!(v.len(), 2);
        assert!(!b.report(Turn(1), PlayerId(1), h(1), 8));
        assert_eq!(b.pending(), 0);
    }
}
