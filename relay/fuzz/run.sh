#!/bin/sh
# Runs the relay's `resume` fuzz target for a bounded time (default 60 s of
# fuzzing, after a build of about 5 minutes cold on two cores) on the stable
# toolchain: cargo-fuzz passes nightly-only flags (-Zsanitizer=address,
# -Zbuild-std), which RUSTC_BOOTSTRAP=1 lets stable rustc accept.
#
#   relay/fuzz/run.sh [SECONDS]       # from anywhere in the repository
#
# Needs `cargo install cargo-fuzz --locked` once and a C++ compiler (libFuzzer).
# New inputs go to a scratch directory, not to the committed seed corpus
# (relay/fuzz/corpus/resume, which is only read); a crash is written to
# relay/fuzz/artifacts/resume/ and the script exits non-zero. Not part of
# .ci/run; `cargo test -p lockstep-relay` runs every seed on stable
# (relay::resume::tests::the_resume_fuzz_corpus_keeps_the_targets_promise).
set -eu
seconds="${1:-60}"
cd "$(dirname "$0")/.."
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
RUSTC_BOOTSTRAP=1 cargo fuzz run resume "$scratch" fuzz/corpus/resume -- \
    -max_total_time="$seconds"
