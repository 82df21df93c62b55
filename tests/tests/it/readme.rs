//! Every command line in the documentation's code blocks names a binary and
//! flags that exist: README.md and every markdown file rendered into the
//! crates' docs ([`DOC_FILES`]), and the relay's Dockerfile.
//!
//! The Quick start block itself is run literally by `.ci/quickstart` (part of
//! `.ci/run`); this test covers every other line cheaply: it finds each
//! invocation of one of the workspace's binaries, resolves the binary the way
//! cargo would (`-p`, `--bin`, `default-run`), and runs it with the documented
//! arguments plus `--help`. clap parses every argument before it acts on
//! `--help`, so an unknown subcommand or flag, or a value of the wrong type,
//! fails the run, while a complete line prints the help and exits 0.
//!
//! Conventions for command lines in the docs (also in `tests::development`):
//! - lines in code blocks tagged `sh`, `bash`, `text` or untagged are read;
//!   `rust` blocks are not;
//! - checked are `cargo run ... -- ARGS` (not `--example`),
//!   `target/<profile>/BIN ARGS`, and lines starting with `relay`, `peer`,
//!   `replay`, `netsim` or `bench`; of every other `cargo` line (but
//!   `cargo fuzz` and `cargo install`), the packages, `--test`, `--example`
//!   and `--bin` targets and `--manifest-path` it names must exist; other
//!   commands (`cd`, scripts) are not checked;
//! - `#` starts a comment; a trailing `\` continues the line; a leading
//!   `VAR=value` is an environment setting; `| ...` (a pipe) and a trailing
//!   `&` are shell, not arguments;
//! - within a command, two or more spaces start a description (for usage
//!   tables like the `replay` tool's);
//! - `[...]` marks optional arguments: they are checked as if given; a
//!   standalone `...` means "and so on" and is skipped;
//! - an all-capitals word (`FILE`, `N`, `HEX`) or a `<word>` is a
//!   placeholder and is checked as the value `1`.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The binaries a documented line may name.
const BINS: [&str; 5] = ["relay", "peer", "replay", "netsim", "bench"];

/// Every markdown file whose command lines are checked, relative to the
/// workspace root: the README and the files rendered into the crates' docs.
const DOC_FILES: [&str; 7] = [
    "README.md",
    "sim/docs/manual.md",
    "lockstep/docs/reference.md",
    "lockstep/docs/guide.md",
    "relay/docs/operations.md",
    "replays/docs/manual.md",
    "tests/docs/development.md",
];

/// One command line found in the README: its 1-based line number, the text
/// as written (continuations joined), and what it invokes.
#[derive(Debug, PartialEq, Eq)]
struct Invocation {
    line: usize,
    text: String,
    target: Target,
    args: Vec<String>,
}

/// How a README line names its binary.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// `cargo run -p package [--bin bin]`.
    Cargo {
        package: Option<String>,
        bin: Option<String>,
    },
    /// A binary by name (`relay ...`, `target/release/relay ...`).
    Bin(String),
}

/// The README's code-block lines that may hold commands, continuations
/// joined, with their 1-based line numbers.
fn command_lines(readme: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence: Option<bool> = None; // Some(checked?) inside a block
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in readme.lines().enumerate() {
        let trimmed = raw.trim_start();
        if let Some(tag) = trimmed.strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(matches!(tag.trim(), "" | "sh" | "bash" | "text")),
            };
            pending = None;
            continue;
        }
        if fence != Some(true) {
            continue;
        }
        let (start, mut text) = match pending.take() {
            Some((start, before)) => (start, format!("{before} {}", raw.trim())),
            None => (i + 1, raw.to_owned()),
        };
        if let Some(body) = text.trim_end().strip_suffix('\\') {
            text = body.trim_end().to_owned();
            pending = Some((start, text));
            continue;
        }
        out.push((start, text));
    }
    out
}

/// Removes a `#` comment (at the start, or after whitespace).
fn strip_comment(text: &str) -> &str {
    let t = text.trim();
    if t.starts_with('#') {
        return "";
    }
    match t.find(" #") {
        Some(i) => &t[..i],
        None => t,
    }
}

/// Reads one command line; `None` when it invokes none of [`BINS`].
fn parse(line: usize, text: &str) -> Option<Invocation> {
    let mut cmd = strip_comment(text).trim();
    if let Some(i) = cmd.find(" | ") {
        cmd = &cmd[..i];
    }
    let mut cmd = cmd.trim_end().trim_end_matches('&').trim_end();
    // Two spaces end the command and start a description.
    if let Some(i) = cmd.find("  ") {
        cmd = &cmd[..i];
    }
    let mut words: Vec<&str> = cmd.split_whitespace().collect();
    while words.first().is_some_and(|w| is_env_setting(w)) {
        words.remove(0);
    }
    let first = *words.first()?;
    let (target, rest) = if first == "cargo" && words.get(1) == Some(&"run") {
        let sep = words.iter().position(|w| *w == "--");
        let opts = &words[2..sep.unwrap_or(words.len())];
        if opts.contains(&"--example") {
            return None;
        }
        let value = |flag: &str| {
            opts.iter()
                .position(|w| *w == flag)
                .and_then(|i| opts.get(i + 1))
                .map(|s| (*s).to_owned())
        };
        let package = value("-p").or_else(|| value("--package"));
        let bin = value("--bin");
        let args = sep.map_or_else(Vec::new, |s| words[s + 1..].to_vec());
        (Target::Cargo { package, bin }, args)
    } else if let Some(name) = first
        .strip_prefix("target/release/")
        .or_else(|| first.strip_prefix("target/debug/"))
    {
        if name.starts_with("examples/") {
            return None;
        }
        (Target::Bin(name.to_owned()), words[1..].to_vec())
    } else if BINS.contains(&first) {
        (Target::Bin(first.to_owned()), words[1..].to_vec())
    } else {
        return None;
    };
    Some(Invocation {
        line,
        text: text.trim().to_owned(),
        target,
        args: rest.iter().filter_map(|w| argument(w)).collect(),
    })
}

fn is_env_setting(word: &str) -> bool {
    word.split_once('=').is_some_and(|(k, _)| {
        !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c == '_')
    })
}

/// One argument with the README conventions applied: `[`, `]` and `...`
/// dropped, placeholders replaced by `1`; `None` when nothing is left.
fn argument(word: &str) -> Option<String> {
    let w = word.trim_start_matches('[').trim_end_matches("...");
    let w = w.trim_end_matches(']').trim_end_matches("...");
    if w.is_empty() {
        return None;
    }
    let placeholder = (w.starts_with('<') && w.ends_with('>'))
        || (w.starts_with(|c: char| c.is_ascii_uppercase())
            && w.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'));
    Some(if placeholder {
        "1".to_owned()
    } else {
        w.to_owned()
    })
}

/// A workspace package as `cargo metadata` describes it.
#[derive(Debug)]
struct Package {
    bins: Vec<String>,
    default_run: Option<String>,
    /// Every target as (kind, name): `bin`, `lib`, `test`, `example`, `bench`.
    targets: Vec<(String, String)>,
}

/// Each workspace package, from `cargo metadata`.
fn packages() -> BTreeMap<String, Package> {
    let root = workspace_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata JSON");
    let mut map = BTreeMap::new();
    for p in meta["packages"].as_array().expect("packages") {
        let mut targets = Vec::new();
        for t in p["targets"].as_array().expect("targets") {
            let name = t["name"].as_str().expect("target name").to_owned();
            for k in t["kind"].as_array().expect("target kind") {
                targets.push((k.as_str().unwrap_or("").to_owned(), name.clone()));
            }
        }
        let bins = targets
            .iter()
            .filter(|(k, _)| k == "bin")
            .map(|(_, n)| n.clone())
            .collect();
        let default_run = p["default_run"].as_str().map(str::to_owned);
        map.insert(
            p["name"].as_str().expect("package name").to_owned(),
            Package {
                bins,
                default_run,
                targets,
            },
        );
    }
    map
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf()
}

/// The binary `cargo run` would pick for a package, or cargo's complaint.
fn resolve_cargo(
    packages: &BTreeMap<String, Package>,
    package: Option<&str>,
    bin: Option<&str>,
) -> Result<String, String> {
    let package = package.ok_or("`cargo run` without `-p`: which package is ambiguous")?;
    let Package {
        bins, default_run, ..
    } = packages
        .get(package)
        .ok_or_else(|| format!("no package `{package}` in the workspace"))?;
    match (bin, default_run, bins.as_slice()) {
        (Some(b), _, _) if bins.iter().any(|x| x == b) => Ok(b.to_owned()),
        (Some(b), _, _) => Err(format!("package `{package}` has no binary `{b}`")),
        (None, Some(d), _) => Ok(d.clone()),
        (None, None, [only]) => Ok(only.clone()),
        (None, None, _) => Err(format!(
            "`cargo run -p {package}` could not determine which binary to run \
             (available: {}); add `--bin` or `default-run`",
            bins.join(", ")
        )),
    }
}

fn binary_path(name: &str) -> Option<PathBuf> {
    let bins = tests::harness::bins();
    Some(match name {
        "relay" => bins.relay.clone(),
        "peer" => bins.peer.clone(),
        "replay" => bins.replay.clone(),
        "netsim" => bins.netsim.clone(),
        "bench" => PathBuf::from(env!("CARGO_BIN_EXE_bench")),
        _ => return None,
    })
}

/// Runs the binary with the arguments plus `--help`; `Err` with clap's
/// complaint if it does not accept them.
fn check(bin: &str, args: &[String]) -> Result<(), String> {
    let path = binary_path(bin).ok_or_else(|| format!("no binary `{bin}` in the workspace"))?;
    let out = Command::new(&path)
        .args(args)
        .arg("--help")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// For any `cargo` line: the packages (`-p`), targets (`--test`,
/// `--example`, `--bin`) and `--manifest-path` it names exist. `Ok(false)`
/// when the line is not a cargo command this checks.
fn check_cargo_names(packages: &BTreeMap<String, Package>, text: &str) -> Result<bool, String> {
    let words: Vec<&str> = strip_comment(text)
        .split_whitespace()
        .skip_while(|w| is_env_setting(w))
        .take_while(|w| *w != "--")
        .collect();
    if words.first() != Some(&"cargo")
        || words
            .get(1)
            .is_some_and(|w| *w == "fuzz" || *w == "install")
    {
        return Ok(false);
    }
    let values = |flags: &[&str]| -> Vec<&str> {
        words
            .windows(2)
            .filter(|w| flags.contains(&w[0]))
            .map(|w| w[1])
            .collect()
    };
    let named = values(&["-p", "--package"]);
    for p in &named {
        if !packages.contains_key(*p) {
            return Err(format!("no package `{p}` in the workspace"));
        }
    }
    for (flag, kind) in [
        ("--test", "test"),
        ("--example", "example"),
        ("--bin", "bin"),
    ] {
        for name in values(&[flag]) {
            let found = packages
                .iter()
                .filter(|(p, _)| named.is_empty() || named.contains(&p.as_str()))
                .any(|(_, p)| p.targets.iter().any(|(k, n)| k == kind && n == name));
            if !found {
                return Err(format!("no {kind} target `{name}` in {named:?}"));
            }
        }
    }
    for path in values(&["--manifest-path"]) {
        if !workspace_root().join(path).is_file() {
            return Err(format!("no file `{path}`"));
        }
    }
    Ok(true)
}

/// Every problem with one document's command lines, one line each, as
/// `file:line: `command`: complaint`; and how many lines were checked.
fn problems(file: &str, text: &str) -> (usize, Vec<String>) {
    let packages = packages();
    let mut checked = 0;
    let mut bad = Vec::new();
    for (line, text) in command_lines(text) {
        match check_cargo_names(&packages, &text) {
            Ok(true) => checked += 1,
            Ok(false) => {}
            Err(e) => {
                checked += 1;
                bad.push(format!("{file}:{line}: `{}`: {e}", text.trim()));
            }
        }
        let Some(inv) = parse(line, &text) else {
            continue;
        };
        checked += 1;
        let bin = match &inv.target {
            Target::Bin(b) => Ok(b.clone()),
            Target::Cargo { package, bin } => {
                resolve_cargo(&packages, package.as_deref(), bin.as_deref())
            }
        };
        if let Err(e) = bin.and_then(|b| check(&b, &inv.args)) {
            bad.push(format!("{file}:{}: `{}`: {e}", inv.line, inv.text));
        }
    }
    (checked, bad)
}

#[test]
fn every_documented_command_line_names_a_binary_and_flags_that_exist() {
    let mut checked = 0;
    let mut bad = Vec::new();
    for file in DOC_FILES {
        let text = std::fs::read_to_string(workspace_root().join(file))
            .unwrap_or_else(|e| panic!("read {file}: {e}"));
        let (n, b) = problems(file, &text);
        checked += n;
        bad.extend(b);
    }
    assert!(
        bad.is_empty(),
        "{} of {checked} documented command lines do not run as written:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // The docs have dozens; finding few means the parser stopped seeing them.
    assert!(checked >= 60, "only {checked} command lines found");
}

/// A markdown file added under a crate's `docs/` is checked too.
#[test]
fn every_docs_markdown_file_is_in_the_checked_list() {
    let root = workspace_root();
    for member in ["sim", "lockstep", "relay", "replays", "tests"] {
        let Ok(dir) = std::fs::read_dir(root.join(member).join("docs")) else {
            continue;
        };
        for entry in dir {
            let path = entry.expect("read docs dir").path();
            if path.extension().is_some_and(|e| e == "md") {
                let rel = path
                    .strip_prefix(&root)
                    .expect("under the root")
                    .to_string_lossy()
                    .replace('\\', "/");
                assert!(
                    DOC_FILES.contains(&rel.as_str()),
                    "{rel} is not in DOC_FILES"
                );
            }
        }
    }
}

#[test]
fn a_nonexistent_flag_subcommand_binary_or_ambiguous_cargo_run_is_caught() {
    let readme = "\
```sh
relay serve --no-such-flag 1
target/release/replay verify FILE --json
replay frobnicate FILE
cargo run -p lockstep-relay -- demo --loss 0.1
cargo run -p lockstep-tests -- --quick --nope
target/release/nosuchbin --help
peer --relay 127.0.0.1:7777 --players nine
cargo test -p lockstep-tests --test no_such_test
cargo run -p lockstep-replays --example no_such_example
```
";
    let (checked, bad) = problems("README.md", readme);
    // 7 binary lines, of which the two `cargo run` lines count twice (their
    // cargo names are checked too), + 2 other cargo lines.
    assert_eq!(checked, 11);
    let lines: Vec<&str> = bad
        .iter()
        .map(|b| &b[..b.find(':').unwrap_or(0) + 3])
        .collect();
    // Lines 2 (bogus flag), 4 (bogus subcommand), 6 (bogus bench flag),
    // 7 (no such binary), 8 (not a number), 9 (no such test target) and
    // 10 (no such example) fail; 3 and 5 are fine.
    assert_eq!(bad.len(), 7, "{bad:#?}");
    for n in [2, 4, 6, 7, 8, 9, 10] {
        assert!(
            bad.iter()
                .any(|b| b.starts_with(&format!("README.md:{n}:"))),
            "line {n} not caught: {lines:?}"
        );
    }
}

#[test]
fn cargo_run_resolves_binaries_like_cargo() {
    let packages = packages();
    // The Quick start relies on this: `cargo run -p lockstep-relay -- demo`.
    assert_eq!(
        resolve_cargo(&packages, Some("lockstep-relay"), None),
        Ok("relay".to_owned())
    );
    assert_eq!(
        resolve_cargo(&packages, Some("lockstep-net"), Some("peer")),
        Ok("peer".to_owned())
    );
    assert_eq!(
        resolve_cargo(&packages, Some("lockstep-tests"), None),
        Ok("bench".to_owned())
    );
    assert!(resolve_cargo(&packages, Some("lockstep-relay"), Some("nope")).is_err());
    assert!(resolve_cargo(&packages, None, None).is_err());
}

#[test]
fn readme_conventions_are_read_as_documented() {
    let text = "\
```text
netsim --listen 127.0.0.1:7000 \\
       --loss 0.1 [--bandwidth 64000] [--json]   # comment
replay state FILE --turn N [--json]  world summary after turn N
relay token --key-file k [--relay 203.0.113.7:7777]... ... and more
INSTA_UPDATE=always target/release/peer --relay 127.0.0.1:1 --token <hex> &
replay export FILE | head
cargo test -p lockstep-tests --test e2e
```
```rust
relay serve --in-a-rust-block
```
";
    let got: Vec<Invocation> = command_lines(text)
        .into_iter()
        .filter_map(|(l, t)| parse(l, &t))
        .collect();
    let args: Vec<Vec<&str>> = got
        .iter()
        .map(|i| i.args.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(
        args,
        [
            vec![
                "--listen",
                "127.0.0.1:7000",
                "--loss",
                "0.1",
                "--bandwidth",
                "64000",
                "--json"
            ],
            vec!["state", "1", "--turn", "1", "--json"],
            vec![
                "token",
                "--key-file",
                "k",
                "--relay",
                "203.0.113.7:7777",
                "and",
                "more"
            ],
            vec!["--relay", "127.0.0.1:1", "--token", "1"],
            vec!["export", "1"],
        ]
    );
    assert_eq!(got[0].line, 2);
    assert_eq!(got[3].target, Target::Bin("peer".to_owned()));
}

/// The words of a Dockerfile instruction's JSON-array (exec) form,
/// `["a", "b"]`; `None` for the shell form. Enough for the relay's file: no
/// escaped quotes inside the words this test reads.
fn exec_form(rest: &str) -> Option<Vec<String>> {
    let inner = rest.trim().strip_prefix('[')?.strip_suffix(']')?;
    Some(
        inner
            .split("\", \"")
            .map(|w| w.trim().trim_matches('"').to_owned())
            .collect(),
    )
}

/// One stage of a Dockerfile: its base (`FROM` with global `ARG` defaults
/// substituted), its name (`AS`), and the instructions in it.
#[derive(Debug, Default)]
struct Stage {
    from: String,
    name: Option<String>,
    instructions: Vec<(String, String)>,
}

/// A Dockerfile's stages, continuation lines joined; `ARG`s before the
/// first `FROM` are replaced by their defaults in the `FROM` lines.
fn dockerfile_stages(text: &str) -> Vec<Stage> {
    let mut instructions: Vec<(String, String)> = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let t = line.trim();
        if pending.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(body) = t.strip_suffix('\\') {
            pending.push_str(body);
            pending.push(' ');
            continue;
        }
        pending.push_str(t);
        let (word, rest) = pending.split_once(' ').unwrap_or((&pending, ""));
        instructions.push((word.to_ascii_uppercase(), rest.trim().to_owned()));
        pending.clear();
    }
    let mut globals: Vec<(String, String)> = Vec::new();
    let mut stages: Vec<Stage> = Vec::new();
    for (word, rest) in instructions {
        match (word.as_str(), stages.last_mut()) {
            ("ARG", None) => {
                let (k, v) = rest.split_once('=').unwrap_or((&rest, ""));
                globals.push((k.to_owned(), v.to_owned()));
            }
            ("FROM", _) => {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let mut from = words[0].to_owned();
                for (k, v) in &globals {
                    from = from.replace(&format!("${{{k}}}"), v);
                }
                let name = match words.as_slice() {
                    [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some((*name).to_owned()),
                    _ => None,
                };
                stages.push(Stage {
                    from,
                    name,
                    instructions: Vec::new(),
                });
            }
            (_, Some(stage)) => stage.instructions.push((word, rest)),
            (_, None) => panic!("{word} before the first FROM"),
        }
    }
    stages
}

/// No container tool runs in the test suite (CI builds and runs the image:
/// relay/deploy/image-test.sh), so the relay's image recipe is linted here:
/// every `COPY` source exists in the build context (the workspace root), the
/// cargo build names a real package and binary, the entry point is that
/// binary, `relay` accepts the default arguments, the exposed ports are the
/// ones it serves, and the builder's Rust is the workspace's `rust-version`.
/// The stages: `runtime` (a Debian base by default, the user, ports, health
/// check, entry point), `prebuilt` (a binary from `target/<profile>`, before
/// the builder so that target never needs the Rust image), `build` and the
/// default last stage, which copies what `build` compiled.
#[test]
fn the_relay_dockerfile_builds_and_runs_what_exists() {
    let root = workspace_root();
    let text =
        std::fs::read_to_string(root.join("relay/Dockerfile")).expect("read relay/Dockerfile");
    let stages = dockerfile_stages(&text);
    let names: Vec<Option<&str>> = stages.iter().map(|s| s.name.as_deref()).collect();
    assert_eq!(
        names,
        [Some("runtime"), Some("prebuilt"), Some("build"), None],
        "the stages: runtime, prebuilt (before the builder), build, the default"
    );
    let [runtime, prebuilt, build, last] = stages.as_slice() else {
        unreachable!("four stages");
    };
    let packages = packages();

    // The builder: the workspace's sources and rust-version, the relay binary.
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("read Cargo.toml");
    let msrv = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("workspace rust-version")
        .trim_matches('"');
    assert!(
        build.from.starts_with(&format!("rust:{msrv}-")),
        "builder {} is not Rust {msrv}",
        build.from
    );
    let mut copies = 0;
    let mut built_bin = None;
    let mut built_profile: Option<String> = None;
    for (word, rest) in &build.instructions {
        match word.as_str() {
            "COPY" => {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let (dest, sources) = words.split_last().expect("COPY has a destination");
                assert!(!dest.is_empty());
                for src in sources {
                    assert!(
                        root.join(src).exists(),
                        "relay/Dockerfile copies {src}, which is not in the repository"
                    );
                    copies += 1;
                }
            }
            "RUN" if rest.contains("cargo build") => {
                let cargo = &rest[rest.find("cargo build").expect("cargo")..];
                assert_eq!(check_cargo_names(&packages, cargo), Ok(true), "{cargo}");
                let words: Vec<&str> = cargo.split_whitespace().collect();
                built_bin = words
                    .windows(2)
                    .find(|w| w[0] == "--bin")
                    .map(|w| w[1].to_owned());
                // `--release` builds into target/release, `--profile P` into target/P.
                built_profile = if words.contains(&"--release") {
                    Some("release".to_owned())
                } else {
                    words
                        .windows(2)
                        .find(|w| w[0] == "--profile")
                        .map(|w| w[1].to_owned())
                };
            }
            _ => {}
        }
    }
    assert!(
        copies >= 5,
        "the workspace's manifests and crates are copied"
    );
    assert_eq!(
        built_bin.as_deref(),
        Some("relay"),
        "the build makes the relay binary"
    );
    let profile = built_profile.expect("the builder runs cargo build");

    // The runtime: Debian by default, the entry point, its arguments, ports.
    assert!(
        runtime.from.starts_with("debian:"),
        "the runtime's default base is {}",
        runtime.from
    );
    let find = |word: &str| {
        runtime
            .instructions
            .iter()
            .filter(|(w, _)| w == word)
            .map(|(_, rest)| rest.as_str())
            .collect::<Vec<_>>()
    };
    let entry = find("ENTRYPOINT")
        .last()
        .and_then(|r| exec_form(r))
        .expect("an exec-form ENTRYPOINT in the runtime stage");
    assert_eq!(entry, ["/usr/local/bin/relay"]);
    let args = find("CMD")
        .last()
        .and_then(|r| exec_form(r))
        .expect("an exec-form CMD with relay's arguments");
    check("relay", &args).unwrap_or_else(|e| panic!("relay {args:?}: {e}"));
    assert!(
        !find("HEALTHCHECK").is_empty(),
        "the runtime keeps its health check"
    );
    let exposed: Vec<String> = find("EXPOSE")
        .iter()
        .flat_map(|r| r.split_whitespace().map(str::to_owned))
        .collect();
    // The ports it binds are the ones exposed, UDP for the game, TCP for metrics.
    let port = |flag: &str| {
        args.iter()
            .find_map(|a| a.strip_prefix(flag))
            .and_then(|addr| addr.rsplit(':').next())
            .unwrap_or_else(|| panic!("CMD sets {flag}"))
            .to_owned()
    };
    assert!(
        exposed.contains(&format!("{}/udp", port("--bind="))),
        "{exposed:?}"
    );
    assert!(
        exposed.contains(&format!("{}/tcp", port("--metrics="))),
        "{exposed:?}"
    );

    // Both images put a relay binary at the entry point, on the runtime.
    let only_copy = |stage: &Stage| -> Vec<String> {
        assert_eq!(
            stage.from, "runtime",
            "{:?} builds on the runtime",
            stage.name
        );
        let copies: Vec<&String> = stage
            .instructions
            .iter()
            .filter(|(w, _)| w == "COPY")
            .map(|(_, rest)| rest)
            .collect();
        assert_eq!(copies.len(), 1, "{:?} copies the binary only", stage.name);
        let words: Vec<String> = copies[0].split_whitespace().map(str::to_owned).collect();
        assert_eq!(words.last().map(String::as_str), Some(entry[0].as_str()));
        words
    };
    // The default: what the builder compiled.
    let words = only_copy(last);
    assert_eq!(
        words[0], "--from=build",
        "the default copies the build's binary"
    );
    assert_eq!(
        words[1],
        format!("/src/target/{profile}/relay"),
        "copies from the build stage, which built into target/{profile}"
    );
    // Prebuilt: the relay binary from a cargo output directory of the context
    // (not in the repository: built before the image).
    let words = only_copy(prebuilt);
    let dir = words[0]
        .strip_prefix("target/")
        .and_then(|p| p.strip_suffix("/relay"))
        .unwrap_or_else(|| panic!("prebuilt copies {}, not target/<profile>/relay", words[0]));
    assert!(
        dir == "release" || dir == "debug" || manifest.contains(&format!("[profile.{dir}]")),
        "target/{dir} is not a cargo profile's output"
    );
}
