//! `BENCHMARKS.md` as named sections, so that `bench --only net,relay`
//! replaces only the sections it measured and keeps the others.
//!
//! A report is a preamble (title and the stamp of the latest run) followed
//! by `## ` sections; every section begins with the stamp of the run that
//! measured it, so a kept section still says when, where and with which
//! command it was measured.

/// The sections `bench` writes, in report order: the `--only` name and the
/// heading.
pub const SECTIONS: [(&str, &str); 14] = [
    ("sim", "Simulation: step and state hash per turn"),
    ("replay", "Replay verification speed"),
    ("latency", "Command latency against each player's own floor"),
    ("net", "Turn latency under loss: our transport vs TCP"),
    ("relay", "Relay capacity"),
    ("crypto", "Relay: payload encryption in token mode"),
    ("crowd", "Relay memory under a hostile crowd"),
    ("bandwidth", "Bandwidth against the Age of Empires budget"),
    ("big", "Big matches"),
    ("bulk", "Bulk transfer and message size (transport)"),
    ("rejoin", "Rejoin and late spectators"),
    (
        "restart",
        "Relay restarts: matches resumed from their recordings",
    ),
    ("viewer", "Replay viewer in the browser"),
    ("speculation", "Speculation"),
];

/// The heading of section `name`, or `None` for a name `bench` does not
/// know (bad usage of `--only`).
#[must_use]
pub fn heading(name: &str) -> Option<&'static str> {
    SECTIONS.iter().find(|(n, _)| *n == name).map(|(_, h)| *h)
}

/// A report split into its preamble and its `## ` sections, each as
/// (heading text, the section's whole text including its heading line).
fn split(md: &str) -> (String, Vec<(String, String)>) {
    let mut preamble = String::new();
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in md.split_inclusive('\n') {
        if let Some(h) = line.strip_prefix("## ") {
            sections.push((h.trim_end().to_owned(), String::new()));
        }
        match sections.last_mut() {
            Some((_, text)) => text.push_str(line),
            None => preamble.push_str(line),
        }
    }
    (preamble, sections)
}

/// The report to write after a run that produced `fresh` (its preamble and
/// the sections it measured), given the report already on disk, if any:
/// the fresh preamble, then every known section in report order, fresh if
/// this run measured it and otherwise as it was; sections this harness does
/// not know are kept after them.
#[must_use]
pub fn merge(existing: Option<&str>, fresh: &str) -> String {
    let (preamble, new) = split(fresh);
    let (_, old) = existing.map_or_else(|| (String::new(), Vec::new()), split);
    let pick = |h: &str| {
        new.iter()
            .chain(old.iter())
            .find(|(x, _)| x == h)
            .map(|(_, t)| t.clone())
    };
    let mut out = preamble;
    let known = |h: &str| SECTIONS.iter().any(|(_, k)| *k == h);
    for (_, h) in SECTIONS {
        if let Some(t) = pick(h) {
            out.push_str(&t);
        }
    }
    for (h, t) in new.iter().chain(old.iter()) {
        if !known(h) && !out.contains(&format!("## {h}\n")) {
            out.push_str(t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(stamp: &str, sections: &[(&str, &str)]) -> String {
        let mut md = format!("# Benchmarks\n\n{stamp}\n\n");
        for (name, body) in sections {
            let h = heading(name).unwrap();
            md.push_str(&format!("## {h}\n\n*{stamp}*\n\n{body}\n\n"));
        }
        md
    }

    #[test]
    fn only_replaces_its_own_sections_and_keeps_the_rest_in_order() {
        let all: Vec<(&str, &str)> = SECTIONS.iter().map(|(n, _)| (*n, "old figures")).collect();
        let old = report("run 1", &all);
        let fresh = report("run 2", &[("relay", "new relay"), ("net", "new net")]);
        let merged = merge(Some(&old), &fresh);
        // Every section is still there, in report order.
        let (preamble, sections) = split(&merged);
        let headings: Vec<&str> = sections.iter().map(|(h, _)| h.as_str()).collect();
        let expected: Vec<&str> = SECTIONS.iter().map(|(_, h)| *h).collect();
        assert_eq!(headings, expected);
        assert!(preamble.contains("run 2"));
        for (h, text) in &sections {
            let rerun = [heading("net").unwrap(), heading("relay").unwrap()].contains(&h.as_str());
            if rerun {
                assert!(text.contains("*run 2*") && text.contains("new "), "{text}");
                assert!(!text.contains("old figures"), "{text}");
            } else {
                assert!(
                    text.contains("*run 1*") && text.contains("old figures"),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn a_full_run_or_a_missing_file_gives_the_fresh_report() {
        let fresh = report("run 2", &[("sim", "s"), ("bandwidth", "b")]);
        assert_eq!(merge(None, &fresh), fresh);
        let all: Vec<(&str, &str)> = SECTIONS.iter().map(|(n, _)| (*n, "new")).collect();
        let full = report("run 3", &all);
        assert_eq!(merge(Some(&fresh), &full), full);
    }

    #[test]
    fn sections_this_harness_does_not_know_are_kept() {
        let old = format!(
            "{}## Notes\n\nhand-kept\n",
            report("run 1", &[("sim", "s")])
        );
        let merged = merge(Some(&old), &report("run 2", &[("sim", "s2")]));
        assert!(merged.ends_with("## Notes\n\nhand-kept\n"), "{merged}");
        assert!(merged.contains("s2") && !merged.contains("*run 1*"));
    }

    #[test]
    fn every_only_name_has_a_heading_and_unknown_names_have_none() {
        for (n, h) in SECTIONS {
            assert_eq!(heading(n), Some(h));
        }
        assert_eq!(heading("nosuchsection"), None);
    }
}
