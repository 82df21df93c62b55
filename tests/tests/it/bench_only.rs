//! `bench --only` replaces only its own sections of the report and keeps
//! the others (it used to rewrite the whole file with just its sections).

use std::process::Command;
use tests::harness::scratch_dir;

#[test]
fn bench_only_keeps_the_sections_it_did_not_measure() {
    let dir = scratch_dir("bench-only");
    let out = dir.join("BENCHMARKS.md");
    let earlier = "# Benchmarks\n\nearlier run\n\n\
        ## Simulation: step and state hash per turn\n\nsim figures kept\n\n\
        ## Relay capacity\n\nrelay figures kept\n\n\
        ## Bandwidth against the Age of Empires budget\n\nold bandwidth figures\n";
    std::fs::write(&out, earlier).unwrap();
    // The bandwidth section runs in virtual time: about a second.
    let status = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["--quick", "--only", "bandwidth", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    let md = std::fs::read_to_string(&out).unwrap();
    let headings: Vec<&str> = md.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(
        headings,
        [
            "## Simulation: step and state hash per turn",
            "## Relay capacity",
            "## Bandwidth against the Age of Empires budget",
        ]
    );
    assert!(md.contains("sim figures kept") && md.contains("relay figures kept"));
    assert!(!md.contains("old bandwidth figures") && !md.contains("earlier run"));
    // The fresh section says when and how it was measured.
    let bw = &md[md.find("## Bandwidth").unwrap()..];
    assert!(
        bw.contains("Measured on") && bw.contains("--only bandwidth"),
        "{bw}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the real-process 32-player bench (`tests::bench::big_procs`) in its
/// quick form and prints its markdown: six 30 s matches of 32 player
/// processes, four of them with 64 spectator processes coming and going
/// (about 3 min 15 s), so it is not part of the suite. Run it on the
/// release build:
/// `cargo test --release -p lockstep-tests --test it big_procs -- --ignored --nocapture`
/// (`BIG_PROCS_FULL=1`: the full form, 600 turns, three rounds, about 10 min).
#[test]
#[ignore = "a benchmark of about 3 minutes with up to 49 processes at once; run it by hand"]
fn big_procs_quick_prints_its_section() {
    let _cpu = tests::harness::heavy_alone();
    let quick = std::env::var_os("BIG_PROCS_FULL").is_none();
    let f = tests::bench::big_procs::measure(quick).unwrap();
    let md = tests::bench::big_procs::render(&f);
    println!("{md}");
    assert!(md.starts_with("### Real processes: 32 players, spectators joining and leaving"));
}
