//! The replay viewer in a real headless Chromium: every golden replay of
//! `replays/tests/data` re-simulated by the page's WebAssembly must give,
//! turn for turn, the hashes native `replays::verify` computes; the page
//! draws units, seeks, and shows the turn's hash as text.
//!
//! Needs Chromium, chromedriver and the viewer's module, so it is ignored
//! by `cargo test --workspace`; `tests/browser.sh` (run by CI) installs
//! them and runs it with `--ignored`.

use serde_json::Value;
use sim::Simulation;
use std::path::{Path, PathBuf};
use tests::browser::{Browser, BrowserBins, ViewerServer};
use tests::harness::{bins, scratch_dir};

/// Every turn's hash as native verification computes it, as the page lists
/// them (`[{turn, hash}]`), and whether it verified.
fn native(path: &Path) -> (Vec<Value>, bool) {
    fn run<S: Simulation>(path: &Path) -> (Vec<Value>, bool) {
        let reader = replays::Reader::open(path).expect("open fixture");
        let mut list = Vec::new();
        let report = replays::verify::<S, _>(reader, |p| {
            list.push(serde_json::json!({"turn": p.turn.0, "hash": p.hash.to_hex()}));
        });
        (list, report.is_ok_and(|r| r.verified()))
    }
    let header = replays::Reader::open(path)
        .expect("open fixture")
        .header()
        .clone();
    if header.game_id == sim::arena::Arena::GAME_ID {
        run::<sim::arena::Arena>(path)
    } else {
        run::<sim::game::World>(path)
    }
}

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../replays/tests/data");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixtures directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "replay"))
        .collect();
    files.sort();
    files
}

#[test]
#[ignore = "needs Chromium, chromedriver and the viewer's wasm: run by tests/browser.sh"]
fn golden_replays_hash_the_same_in_the_browser_and_the_page_draws_and_seeks() {
    let b = BrowserBins::from_env().unwrap_or_else(|e| panic!("{e}"));
    b.require_wasm().unwrap_or_else(|e| panic!("{e}"));
    let dir = scratch_dir("browser");
    let browser =
        Browser::start(&b, &dir.join("profile"), 1280, 800).unwrap_or_else(|e| panic!("{e}"));
    let files = fixtures();
    assert!(
        files.len() >= 5,
        "the golden replays are missing: {files:?}"
    );
    for file in &files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (expected, verified) = native(file);
        assert!(
            !expected.is_empty(),
            "{name}: native verify computed no turn"
        );

        let server =
            ViewerServer::start(&bins().replay, file, &b.wasm).unwrap_or_else(|e| panic!("{e}"));
        browser.goto(&server.url).unwrap_or_else(|e| panic!("{e}"));
        let opened = browser
            .eval_async("viewer.ready")
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            opened,
            Value::Bool(true),
            "{name}: the page did not open the recording"
        );

        // 1. replays::verify in WebAssembly: the same hash after every turn.
        let page = browser
            .eval_async("viewer.verify()")
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            page["turn_hashes"].as_array(),
            Some(&expected),
            "{name}: per-turn hashes differ from native"
        );
        assert_eq!(
            page["verified"],
            Value::Bool(verified),
            "{name}: verdict differs from native"
        );

        // 2. The page's own background pass (what it draws from) agrees too.
        let indexed = browser
            .eval_async(
                "new Promise(resolve => { const wait = () => { const s = viewer.indexState(); \
                 s && s.done ? resolve(viewer.indexHashes()) : requestAnimationFrame(wait); }; wait(); })",
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let indexed = indexed.as_array().cloned().unwrap_or_default();
        let common = indexed.len().min(expected.len());
        assert!(common > 0, "{name}: the page's pass computed no turn");
        assert_eq!(
            indexed[..common],
            expected[..common],
            "{name}: the page's pass differs from native"
        );

        // 3. Seeking lands on the turn, and the hash on screen is native's.
        let pick = &expected[expected.len() * 2 / 3];
        let turn = pick["turn"].as_u64().unwrap_or_default();
        let seeked = browser
            .eval(&format!("return viewer.seek({turn}).state"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            seeked["turn"].as_u64(),
            Some(turn),
            "{name}: seek landed elsewhere"
        );
        assert_eq!(
            seeked["hash"], pick["hash"],
            "{name}: the hash after seeking differs"
        );
        let shown = browser
            .eval("return document.getElementById('hash-value').textContent")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            shown, pick["hash"],
            "{name}: the hash on screen is not the turn's"
        );

        // 4. Units are drawn: coloured pixels of at least two players' colours.
        let pixels = browser
            .eval_async(
                "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => { \
                 const c = document.getElementById('world'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; \
                 const colours = [[0xe6,0x19,0x4b],[0x3c,0xb4,0x4b],[0x43,0x63,0xd8],[0xf5,0x82,0x31],[0xb1,0x5c,0xe6],[0x42,0xd4,0xf4],[0xf0,0x32,0xe6],[0xbf,0xef,0x45]]; \
                 const seen = colours.map(() => 0); let lit = 0; \
                 for (let i = 0; i < d.length; i += 4) { if (d[i] + d[i+1] + d[i+2] > 60) lit++; \
                   colours.forEach((c, k) => { if (d[i] === c[0] && d[i+1] === c[1] && d[i+2] === c[2]) seen[k]++; }); } \
                 r({lit, players: seen.filter(n => n > 0).length, total: d.length / 4}); })))",
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let players = pixels["players"].as_u64().unwrap_or_default();
        assert!(
            players >= 2,
            "{name}: fewer than two players' colours drawn: {pixels}"
        );
        assert!(
            pixels["lit"].as_u64().unwrap_or_default() * 20
                > pixels["total"].as_u64().unwrap_or(u64::MAX),
            "{name}: under 5 % of the canvas drawn: {pixels}"
        );
        drop(server);
    }
}
