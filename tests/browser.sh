#!/usr/bin/env bash
# The replay viewer in a real browser: the fifth platform of the
# cross-architecture check (tests/cross-arch.sh covers x86_64, i686,
# aarch64 and wasm32-wasip1).
#
# Installs what is missing (Debian's chromium and chromium-driver, the
# wasm32-unknown-unknown target), builds the viewer's WebAssembly module
# (`cargo build --profile wasm -p lockstep-viewer --target
# wasm32-unknown-unknown`) and runs tests/tests/it/browser.rs, which opens
# every golden replay of replays/tests/data with `replay view` in headless
# Chromium and requires the page's per-turn hashes to equal native
# `replays::verify`'s, the page's own pass to agree, a seek to land on its
# turn with native's hash on screen, and units to be drawn; and a match
# watched live from `relay serve --http` (tests/tests/it/browser.rs,
# a_running_match_is_listed_and_watched_live_with_the_relays_hashes).
#
# `tests/browser.sh --build-only` installs and builds, and stops there.
#
# Environment: CARGO_TARGET_DIR (default ./target), BROWSER_WASM_TARGET_DIR
# (default CARGO_TARGET_DIR: where the module is linted and built), CHROMIUM,
# CHROMEDRIVER.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target_dir=${CARGO_TARGET_DIR:-$root/target}
# The module's own builds (a lint and a build for wasm32) may use another
# target directory: .ci/run builds them in the background in one of their
# own, so they never wait for (or hold up) the suite's cargo lock.
wasm_target_dir=${BROWSER_WASM_TARGET_DIR:-$target_dir}
export CARGO_TERM_COLOR=never
start=$SECONDS
log() { printf '== %s\n' "$*"; }
has() { command -v "$1" >/dev/null 2>&1; }

apt_install() {
    log "apt-get install $*"
    local sudo=() aptlog
    [[ $(id -u) == 0 ]] || sudo=(sudo)
    aptlog=$(mktemp)
    if DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get update -qq >"$aptlog" 2>&1 &&
        DEBIAN_FRONTEND=noninteractive "${sudo[@]}" \
            apt-get install -y -qq --no-install-recommends "$@" >>"$aptlog" 2>&1; then
        rm -f "$aptlog"
    else
        cat "$aptlog" >&2
        rm -f "$aptlog"
        echo "browser: apt-get install $* failed" >&2
        exit 1
    fi
}

missing=()
has "${CHROMIUM:-chromium}" || missing+=(chromium)
has "${CHROMEDRIVER:-chromedriver}" || missing+=(chromium-driver)
((${#missing[@]} == 0)) || apt_install "${missing[@]}"
export CHROMIUM=${CHROMIUM:-$(command -v chromium)}
export CHROMEDRIVER=${CHROMEDRIVER:-$(command -v chromedriver)}

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    log "rustup target add wasm32-unknown-unknown"
    rustup target add wasm32-unknown-unknown >/dev/null 2>&1
fi

log "clippy of the viewer's WebAssembly exports"
CARGO_TARGET_DIR=$wasm_target_dir \
    cargo clippy --quiet --locked -p lockstep-viewer --target wasm32-unknown-unknown -- -D warnings

log "build the viewer's module (profile wasm)"
t0=$SECONDS
CARGO_TARGET_DIR=$wasm_target_dir \
    cargo build --quiet --locked --profile wasm -p lockstep-viewer --target wasm32-unknown-unknown
export LOCKSTEP_VIEWER_WASM=$wasm_target_dir/wasm32-unknown-unknown/wasm/viewer.wasm
echo "   built in $((SECONDS - t0)) s ($(stat -c %s "$LOCKSTEP_VIEWER_WASM") bytes)"
# .ci/run builds in the background while other stages run, then checks.
if [[ ${1:-} == --build-only ]]; then
    exit 0
fi

log "golden replays in headless $("$CHROMIUM" --version 2>/dev/null | head -n 1)"
# --workspace, not -p lockstep-tests: the same feature set as the suite's
# `cargo test --workspace`, so its test binary is reused, not rebuilt.
cargo test --quiet --locked --workspace --test it -- --ignored browser::
echo "browser: every golden replay hashes the same in the browser, and a live match shows the relay's hashes ($((SECONDS - start)) s)"
