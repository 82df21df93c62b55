#!/bin/sh
# Runs the relay's `resume` fuzz target (libFuzzer) for a bounded time on
# the stable toolchain, with no cargo-fuzz and no nightly: the target is
# built with the coverage instrumentation libFuzzer needs (LLVM's sanitizer
# coverage passes, which stable rustc takes through -C passes and -C
# llvm-args), `--cfg fuzzing`, overflow checks and debug assertions, no
# address sanitizer (the relay forbids unsafe code). `.ci/run` runs it for
# 20 seconds.
#
#   relay/fuzz/run.sh [SECONDS]       # build, then fuzz; the default is 60
#   relay/fuzz/run.sh --build-only    # build only (CI builds in the background)
#
# Needs a C++ compiler (libfuzzer-sys builds libFuzzer). New inputs go to a
# scratch directory, not to the committed seed corpus
# (relay/fuzz/corpus/resume, which is only read); a crash is written to
# relay/fuzz/artifacts/resume/ and the script exits non-zero. With
# CARGO_TARGET_DIR set, the build goes there (default relay/fuzz/target).
set -eu
build_only=
seconds=60
case "${1:-}" in
    --build-only) build_only=1 ;;
    -h | --help)
        sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    "") ;;
    *[!0-9]*)
        echo "run.sh: expected a number of seconds or --build-only, got '$1'" >&2
        exit 2
        ;;
    *) seconds=$1 ;;
esac
cd "$(dirname "$0")"
host=$(rustc -vV | sed -n 's/^host: //p')
# The flags apply only to what is built for --target (the target, the
# relay, their dependencies), never to build scripts and proc macros.
RUSTFLAGS="--cfg fuzzing -C passes=sancov-module \
-C llvm-args=-sanitizer-coverage-level=4 \
-C llvm-args=-sanitizer-coverage-inline-8bit-counters \
-C llvm-args=-sanitizer-coverage-pc-table \
-C llvm-args=-sanitizer-coverage-trace-compares \
-C debug-assertions -C overflow-checks" \
    cargo build --quiet --locked --profile fuzz --target "$host" --bin resume
[ -z "$build_only" ] || exit 0
target_dir=${CARGO_TARGET_DIR:-target}
case "$target_dir" in
    /*) ;;
    *) target_dir=$PWD/$target_dir ;;
esac
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p artifacts/resume
"$target_dir/$host/fuzz/resume" "$scratch" corpus/resume \
    -max_total_time="$seconds" -artifact_prefix=artifacts/resume/ -print_final_stats=1
