//! What the SDK should hold (labels, the `matches` counter, the `players`
//! list, Ready, Shutdown) against what it was told, and the next call that
//! brings the two together. Pure: the worker makes the calls and reports
//! their answers back.

use super::rest::{Counter, SdkCall, int64};
use std::collections::{BTreeMap, BTreeSet};

/// An answer to a call, as the ledger needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Answer<'a> {
    /// 2xx, with the body.
    Ok(&'a [u8]),
    /// 4xx: the SDK refused the call (the status, the message); repeating
    /// it would be refused again.
    Refused(u16, &'a str),
}

/// The SDK state the relay wants and the state it has told the SDK.
#[derive(Debug)]
pub(crate) struct Ledger {
    counter: String,
    list: String,
    /// Labels to set, in order; `labels_set` of them are done.
    labels: Vec<(String, String)>,
    labels_set: usize,
    matches_capacity: i64,
    players_capacity: i64,
    /// Running matches by number, with their `players` list values.
    matches: BTreeMap<u64, Vec<String>>,
    /// The drain began: the counter's capacity follows the running count
    /// down, so the allocator finds no room here.
    draining: bool,
    shutdown_wanted: bool,
    // What the SDK was told (`None`: not known yet).
    counter_capacity: Option<i64>,
    counter_count: Option<i64>,
    list_capacity: Option<i64>,
    list_values: Option<BTreeSet<String>>,
    ready: bool,
    shut: bool,
    /// The SDK refused a counter or list call: it is left alone from then on.
    counter_off: bool,
    list_off: bool,
    /// The list was full when a value was due (said once).
    list_full_said: bool,
}

impl Ledger {
    /// A ledger for `counter` (capacity `matches_capacity`) and `list`
    /// (capacity `players_capacity`), with `labels` to set before Ready.
    pub(crate) fn new(
        counter: &str,
        list: &str,
        matches_capacity: i64,
        players_capacity: i64,
        labels: Vec<(String, String)>,
    ) -> Self {
        Self {
            counter: counter.to_owned(),
            list: list.to_owned(),
            labels,
            labels_set: 0,
            matches_capacity,
            players_capacity,
            matches: BTreeMap::new(),
            draining: false,
            shutdown_wanted: false,
            counter_capacity: None,
            counter_count: None,
            list_capacity: None,
            list_values: None,
            ready: false,
            shut: false,
            counter_off: false,
            list_off: false,
            list_full_said: false,
        }
    }

    /// A match started (or was resumed) with these list values.
    pub(crate) fn start_match(&mut self, id: u64, players: Vec<String>) {
        self.matches.insert(id, players);
    }

    /// A match ended (one never started is ignored).
    pub(crate) fn end_match(&mut self, id: u64) {
        self.matches.remove(&id);
    }

    /// The drain began: the counter's capacity drops to the running count
    /// and follows it down as matches end.
    pub(crate) fn begin_drain(&mut self) {
        self.draining = true;
    }

    /// The relay stopped: Shutdown once the counter and list are settled.
    pub(crate) fn want_shutdown(&mut self) {
        self.shutdown_wanted = true;
    }

    /// Whether Ready was answered.
    pub(crate) const fn is_ready(&self) -> bool {
        self.ready
    }

    /// Whether Shutdown was answered (or refused).
    pub(crate) const fn is_shut(&self) -> bool {
        self.shut
    }

    /// Whether the drain began.
    pub(crate) const fn is_draining(&self) -> bool {
        self.draining
    }

    fn running(&self) -> i64 {
        i64::try_from(self.matches.len()).unwrap_or(i64::MAX)
    }

    fn capacity_wanted(&self) -> i64 {
        if self.draining {
            self.running().min(self.matches_capacity)
        } else {
            self.matches_capacity
        }
    }

    fn wanted_values(&self) -> BTreeSet<&String> {
        self.matches.values().flatten().collect()
    }

    /// The next call to make, or `None` when the SDK holds what it should.
    /// The order: labels; the list's current values (a restarted container
    /// finds its predecessor's); the capacities; values of ended matches
    /// out of the list; the count; values of new matches in; Ready; and,
    /// once the relay stopped, Shutdown.
    pub(crate) fn next_call(&mut self) -> Option<SdkCall> {
        if let Some((key, value)) = self.labels.get(self.labels_set) {
            return Some(SdkCall::SetLabel {
                key: key.clone(),
                value: value.clone(),
            });
        }
        let list = !self.list_off;
        let counter = !self.counter_off;
        if list && self.list_values.is_none() {
            return Some(SdkCall::ListGet {
                name: self.list.clone(),
            });
        }
        let cap = self.capacity_wanted();
        if counter && self.counter_capacity != Some(cap) && cap >= self.counter_count.unwrap_or(0) {
            return Some(SdkCall::CounterCapacity {
                name: self.counter.clone(),
                capacity: cap,
            });
        }
        let wanted: BTreeSet<String> = self.wanted_values().into_iter().cloned().collect();
        if let (true, Some(have)) = (list, &self.list_values) {
            if self.list_capacity != Some(self.players_capacity) {
                return Some(SdkCall::ListCapacity {
                    name: self.list.clone(),
                    capacity: self.players_capacity,
                });
            }
            if let Some(gone) = have.difference(&wanted).next() {
                return Some(SdkCall::ListRemove {
                    name: self.list.clone(),
                    value: gone.clone(),
                });
            }
        }
        let n = self.running();
        if counter && self.counter_count != Some(n) && n <= self.counter_capacity.unwrap_or(0) {
            return Some(SdkCall::CounterCount {
                name: self.counter.clone(),
                count: n,
            });
        }
        if let (true, Some(have)) = (list, &self.list_values) {
            let room = i64::try_from(have.len()).unwrap_or(i64::MAX) < self.players_capacity;
            if let Some(new) = wanted.difference(have).next() {
                if room {
                    return Some(SdkCall::ListAdd {
                        name: self.list.clone(),
                        value: new.clone(),
                    });
                }
            }
        }
        if !self.ready {
            return Some(SdkCall::Ready);
        }
        if self.shutdown_wanted && !self.shut {
            return Some(SdkCall::Shutdown);
        }
        None
    }

    /// Whether the list has values due that it has no room for (said once:
    /// returns `true` the first time only).
    pub(crate) fn list_full_first_time(&mut self) -> bool {
        let Some(have) = &self.list_values else {
            return false;
        };
        let full = i64::try_from(have.len()).unwrap_or(i64::MAX) >= self.players_capacity;
        let due = self.wanted_values().iter().any(|v| !have.contains(*v));
        if full && due && !self.list_full_said && !self.list_off {
            self.list_full_said = true;
            return true;
        }
        false
    }

    /// Records the answer to `call`. Returns a warning to log when the SDK
    /// refused it (the ledger then gives the call up: a counter or list
    /// the Fleet did not declare is left alone, a refused label skipped).
    pub(crate) fn answered(&mut self, call: &SdkCall, answer: Answer<'_>) -> Option<String> {
        let refused = match answer {
            Answer::Ok(body) => {
                self.done(call, body);
                return None;
            }
            Answer::Refused(status, msg) => (status, msg),
        };
        let (status, msg) = refused;
        match call {
            // Already there / already gone: what was wanted holds.
            SdkCall::ListAdd { value, .. } if status == 409 => {
                if let Some(v) = &mut self.list_values {
                    v.insert(value.clone());
                }
                return None;
            }
            SdkCall::ListRemove { value, .. } if status == 404 => {
                if let Some(v) = &mut self.list_values {
                    v.remove(value);
                }
                return None;
            }
            SdkCall::SetLabel { .. } => self.labels_set += 1,
            SdkCall::CounterCapacity { .. } | SdkCall::CounterCount { .. } => {
                self.counter_off = true;
            }
            SdkCall::ListGet { .. }
            | SdkCall::ListCapacity { .. }
            | SdkCall::ListAdd { .. }
            | SdkCall::ListRemove { .. } => self.list_off = true,
            SdkCall::Ready => self.ready = true,
            SdkCall::Shutdown => self.shut = true,
            SdkCall::Health => {}
        }
        let what = match call {
            SdkCall::CounterCapacity { .. } | SdkCall::CounterCount { .. } => format!(
                "; the `{}` counter is left alone from now on (declare it in the Fleet's spec.counters)",
                self.counter
            ),
            SdkCall::ListGet { .. }
            | SdkCall::ListCapacity { .. }
            | SdkCall::ListAdd { .. }
            | SdkCall::ListRemove { .. } => format!(
                "; the `{}` list is left alone from now on (declare it in the Fleet's spec.lists)",
                self.list
            ),
            _ => String::new(),
        };
        Some(format!(
            "the Agones SDK refused {} ({status}: {msg}){what}",
            call.name()
        ))
    }

    fn done(&mut self, call: &SdkCall, body: &[u8]) {
        match call {
            SdkCall::SetLabel { .. } => self.labels_set += 1,
            SdkCall::CounterCapacity { capacity, .. } => {
                self.counter_capacity = Some(*capacity);
                self.take_counter(body);
            }
            SdkCall::CounterCount { count, .. } => {
                self.counter_count = Some(*count);
                self.take_counter(body);
            }
            SdkCall::ListGet { .. } => {
                let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
                self.list_values = Some(
                    v["values"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|x| Some(x.as_str()?.to_owned()))
                                .collect()
                        })
                        .unwrap_or_default(),
                );
                self.list_capacity = int64(&v["capacity"]);
            }
            SdkCall::ListCapacity { capacity, .. } => self.list_capacity = Some(*capacity),
            SdkCall::ListAdd { value, .. } => {
                if let Some(v) = &mut self.list_values {
                    v.insert(value.clone());
                }
            }
            SdkCall::ListRemove { value, .. } => {
                if let Some(v) = &mut self.list_values {
                    v.remove(value);
                }
            }
            SdkCall::Ready => self.ready = true,
            SdkCall::Shutdown => self.shut = true,
            SdkCall::Health => {}
        }
    }

    /// The counter as the SDK answered it: its word over ours.
    fn take_counter(&mut self, body: &[u8]) {
        if let Ok(c) = Counter::parse(body) {
            self.counter_count = Some(c.count);
            self.counter_capacity = Some(c.capacity);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every call the ledger asks for with what a faithful SDK
    /// would, and returns the calls in order.
    fn settle(l: &mut Ledger, sdk: &mut (i64, i64, BTreeSet<String>)) -> Vec<SdkCall> {
        let mut calls = Vec::new();
        while let Some(call) = l.next_call() {
            assert!(calls.len() < 100, "no end: {calls:?}");
            let body = match &call {
                SdkCall::CounterCapacity { capacity, .. } => {
                    sdk.1 = *capacity;
                    format!(
                        r#"{{"name":"matches","count":"{}","capacity":"{}"}}"#,
                        sdk.0, sdk.1
                    )
                }
                SdkCall::CounterCount { count, .. } => {
                    sdk.0 = *count;
                    format!(
                        r#"{{"name":"matches","count":"{}","capacity":"{}"}}"#,
                        sdk.0, sdk.1
                    )
                }
                SdkCall::ListGet { .. } => {
                    let v: Vec<_> = sdk.2.iter().collect();
                    serde_json::json!({"name": "players", "capacity": "0", "values": v}).to_string()
                }
                SdkCall::ListAdd { value, .. } => {
                    sdk.2.insert(value.clone());
                    "{}".into()
                }
                SdkCall::ListRemove { value, .. } => {
                    sdk.2.remove(value);
                    "{}".into()
                }
                _ => "{}".into(),
            };
            l.answered(&call, Answer::Ok(body.as_bytes()));
            calls.push(call);
        }
        calls
    }

    fn names(calls: &[SdkCall]) -> Vec<String> {
        calls
            .iter()
            .map(|c| match c {
                SdkCall::SetLabel { key, value } => format!("label {key}={value}"),
                SdkCall::CounterCapacity { capacity, .. } => format!("capacity {capacity}"),
                SdkCall::CounterCount { count, .. } => format!("count {count}"),
                SdkCall::ListCapacity { capacity, .. } => format!("list capacity {capacity}"),
                SdkCall::ListAdd { value, .. } => format!("add {value}"),
                SdkCall::ListRemove { value, .. } => format!("remove {value}"),
                c => c.name().to_owned(),
            })
            .collect()
    }

    fn ledger() -> Ledger {
        Ledger::new(
            "matches",
            "players",
            8,
            16,
            vec![("relay-version".into(), "0.1.0".into())],
        )
    }

    #[test]
    fn start_matches_drain_and_shutdown_make_the_documented_sequence() {
        let mut l = ledger();
        let mut sdk = (0, 0, BTreeSet::new());
        assert_eq!(
            names(&settle(&mut l, &mut sdk)),
            [
                "label relay-version=0.1.0",
                "GetList",
                "capacity 8",
                "list capacity 16",
                "Ready"
            ],
            "the counter's answer says its count is 0 already"
        );
        l.start_match(1, vec!["a/0".into(), "a/1".into()]);
        l.start_match(2, vec!["b/0".into()]);
        assert_eq!(
            names(&settle(&mut l, &mut sdk)),
            ["count 2", "add a/0", "add a/1", "add b/0"]
        );
        l.begin_drain();
        l.end_match(1);
        l.end_match(7); // never started here: nothing
        assert_eq!(
            names(&settle(&mut l, &mut sdk)),
            ["remove a/0", "remove a/1", "count 1", "capacity 1"],
            "the capacity drops once the count is under it"
        );
        l.end_match(2);
        l.want_shutdown();
        assert_eq!(
            names(&settle(&mut l, &mut sdk)),
            ["remove b/0", "count 0", "capacity 0", "Shutdown"]
        );
        assert!(l.is_shut());
        assert_eq!(sdk, (0, 0, BTreeSet::new()));
    }

    #[test]
    fn a_restarted_container_clears_its_predecessors_values_and_count() {
        let mut l = ledger();
        let mut sdk = (3, 8, ["old/0".to_owned(), "old/1".to_owned()].into());
        let calls = names(&settle(&mut l, &mut sdk));
        assert_eq!(
            calls,
            [
                "label relay-version=0.1.0",
                "GetList",
                "capacity 8",
                "list capacity 16",
                "remove old/0",
                "remove old/1",
                "count 0",
                "Ready"
            ]
        );
    }

    #[test]
    fn a_full_list_takes_no_more_values_and_says_so_once() {
        let mut l = Ledger::new("matches", "players", 8, 2, Vec::new());
        let mut sdk = (0, 0, BTreeSet::new());
        settle(&mut l, &mut sdk);
        l.start_match(1, vec!["a/0".into(), "a/1".into(), "a/2".into()]);
        assert_eq!(
            names(&settle(&mut l, &mut sdk)),
            ["count 1", "add a/0", "add a/1"]
        );
        assert!(l.list_full_first_time());
        assert!(!l.list_full_first_time());
    }

    #[test]
    fn refusals_give_up_the_counter_or_list_and_skip_labels() {
        let mut l = ledger();
        let label = l.next_call().unwrap();
        let warn = l.answered(&label, Answer::Refused(400, "bad label"));
        assert!(warn.unwrap().contains("SetLabel"));
        let get = l.next_call().unwrap();
        assert!(matches!(get, SdkCall::ListGet { .. }));
        let warn = l.answered(&get, Answer::Refused(404, "not found")).unwrap();
        assert!(warn.contains("spec.lists"), "{warn}");
        let cap = l.next_call().unwrap();
        let warn = l.answered(&cap, Answer::Refused(404, "not found")).unwrap();
        assert!(warn.contains("spec.counters"), "{warn}");
        assert_eq!(l.next_call(), Some(SdkCall::Ready));
        l.start_match(1, vec!["a/0".into()]);
        l.answered(&SdkCall::Ready, Answer::Ok(b"{}"));
        assert_eq!(l.next_call(), None, "counter and list left alone");
    }

    #[test]
    fn an_add_already_there_or_a_remove_already_gone_counts_as_done() {
        let mut l = Ledger::new("matches", "players", 8, 4, Vec::new());
        let mut sdk = (0, 0, BTreeSet::new());
        settle(&mut l, &mut sdk);
        l.start_match(1, vec!["a/0".into()]);
        assert!(matches!(l.next_call(), Some(SdkCall::CounterCount { .. })));
        l.answered(
            &SdkCall::CounterCount {
                name: "matches".into(),
                count: 1,
            },
            Answer::Ok(br#"{"count":"1","capacity":"8"}"#),
        );
        let add = l.next_call().unwrap();
        assert!(l.answered(&add, Answer::Refused(409, "exists")).is_none());
        assert_eq!(l.next_call(), None);
        l.end_match(1);
        let remove = l.next_call().unwrap();
        assert!(l.answered(&remove, Answer::Refused(404, "gone")).is_none());
        assert!(matches!(
            l.next_call(),
            Some(SdkCall::CounterCount { count: 0, .. })
        ));
    }
}
