#!/usr/bin/env bash
# Cross-architecture determinism check.
#
# Builds the `replay` tool for x86_64, i686 (32-bit), aarch64 (run under
# qemu-user) and wasm32-wasip1 (run under Node's WASI) -- plus, on request,
# big-endian s390x (qemu-user) -- re-simulates every
# golden replay in replays/tests/data with `replay verify --json
# --print-hashes` on each, and requires the outputs (every per-turn hash, the
# verdict and the exit code) to be byte-identical to the host's. Installs
# missing prerequisites itself (rustup targets; apt packages only when a tool
# is missing). Exit 0 only when every architecture agrees and every fixture
# has its expected verdict.
#
# The host's leg is built without `--target`, so it shares its artifacts
# with the other release builds of a CI run (the Quick start's demo, the
# release hash snapshots): only the other targets compile here.
#
# `tests/cross-arch.sh --build-only` installs and builds, and stops there.
#
# Environment: CARGO_TARGET_DIR (default ./target), CROSSARCH_PROFILE
# (default release, see the root Cargo.toml), CROSSARCH_TARGETS (a
# space-separated list; the default is below, s390x-unknown-linux-gnu may be
# added).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

profile=${CROSSARCH_PROFILE:-release}
target_dir=${CARGO_TARGET_DIR:-$root/target}
fixtures_dir=$root/replays/tests/data
targets=${CROSSARCH_TARGETS:-x86_64-unknown-linux-gnu i686-unknown-linux-gnu aarch64-unknown-linux-gnu wasm32-wasip1}
# Fixtures recorded from a deliberately corrupted peer: they must diverge (exit 1).
expect_diverge='*desync*'
# Relay recordings of a match with a desync: the majority hashes verify, and
# `replay verify` says the recording holds desyncs (exit 3).
expect_dispute='*dispute*'

export CARGO_TERM_COLOR=never
host=$(rustc -vV | sed -n 's/^host: //p')

# A Linux target of another CPU (not i686, which x86_64 runs natively) is
# cross-linked with Debian's cross gcc and run under qemu-user.
cross_cpu() {
    local cpu=${1%%-*}
    [[ $1 == *-linux-gnu && $cpu != i686 && $cpu != "${host%%-*}" ]] && echo "$cpu"
}
for t in $targets; do
    if cpu=$(cross_cpu "$t"); then
        upper=$(tr 'a-z-' 'A-Z_' <<<"$t")
        var=CARGO_TARGET_${upper}_LINKER
        export "$var=${!var:-$cpu-linux-gnu-gcc}"
        # blake3's build script compiles C/assembly for the target with this.
        var=CC_${t//-/_}
        export "$var=${!var:-$cpu-linux-gnu-gcc}"
    fi
done
start=$SECONDS
log() { printf '== %s\n' "$*"; }

# ---------------------------------------------------------------- prerequisites
has() { command -v "$1" >/dev/null 2>&1; }
apt_updated=
# Installs Debian packages quietly; apt's output is shown only if it fails.
apt_install() {
    log "apt-get install $*"
    local sudo=() aptlog
    [[ $(id -u) == 0 ]] || sudo=(sudo)
    aptlog=$(mktemp)
    if { [[ -n $apt_updated ]] ||
        DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get update -qq; } >"$aptlog" 2>&1 &&
        DEBIAN_FRONTEND=noninteractive "${sudo[@]}" \
            apt-get install -y -qq --no-install-recommends "$@" >>"$aptlog" 2>&1; then
        apt_updated=1
        rm -f "$aptlog"
    else
        cat "$aptlog" >&2
        rm -f "$aptlog"
        echo "cross-arch: apt-get install $* failed" >&2
        exit 1
    fi
}
# Links a trivial 32-bit C program, as rustc does for i686 (`cc -m32`).
links_m32() {
    local probe rc=0
    probe=$(mktemp -d)
    printf 'int main(void){return 0;}\n' |
        cc -m32 -x c - -o "$probe/a.out" >/dev/null 2>&1 || rc=1
    rm -rf "$probe"
    return "$rc"
}

for t in $targets; do
    case $t in
    i686-unknown-linux-gnu)
        has cc || apt_install gcc
        # 32-bit libc and libgcc dev files. Not gcc-multilib: on Debian it
        # conflicts with (and removes) gcc-aarch64-linux-gnu.
        if ! links_m32; then
            apt_install libc6-dev-i386 "lib32gcc-$(gcc -dumpversion | cut -d. -f1)-dev"
        fi
        ;;
    *-linux-gnu)
        if cpu=$(cross_cpu "$t"); then
            case $cpu in
            aarch64) debian_arch=arm64 ;;
            powerpc64le) debian_arch=ppc64el ;;
            *) debian_arch=$cpu ;;
            esac
            has "$cpu-linux-gnu-gcc" ||
                apt_install "gcc-$cpu-linux-gnu" "libc6-dev-$debian_arch-cross"
            has "qemu-$cpu" || apt_install qemu-user
        fi
        ;;
    wasm32-wasip1)
        has node || apt_install nodejs
        ;;
    esac
done

installed_targets=$(rustup target list --installed)
for t in $targets; do
    if ! grep -qx "$t" <<<"$installed_targets"; then
        log "rustup target add $t"
        rustup target add "$t" >/dev/null 2>&1
    fi
done

# ---------------------------------------------------------------- build
# The host's leg without `--target` (target/<profile>/replay, shared with
# the run's other builds of that profile); every other target in one cargo
# invocation, so host-side proc macros and build scripts are compiled once
# and both cores stay busy.
target_args=()
for t in $targets; do
    [[ $t == "$host" ]] || target_args+=(--target "$t")
done
log "build replay for: $targets (profile $profile)"
t0=$SECONDS
cargo build --quiet --locked --profile "$profile" -p lockstep-replays --bin replay
if ((${#target_args[@]})); then
    cargo build --quiet --locked --profile "$profile" -p lockstep-replays --bin replay "${target_args[@]}"
fi
echo "   built in $((SECONDS - t0)) s"
# .ci/run builds in the background while other stages run, then checks.
if [[ ${1:-} == --build-only ]]; then
    exit 0
fi

# ---------------------------------------------------------------- run
# run TARGET ARGS... : the target's replay binary with ARGS, under the right runner.
run() {
    local t=$1
    shift
    local dir=$target_dir/$t/$profile
    [[ $t != "$host" ]] || dir=$target_dir/$profile
    case $t in
    wasm32-wasip1)
        node --experimental-wasi-unstable-preview1 --no-warnings \
            "$root/tests/wasi-run.mjs" "$dir/replay.wasm" "$fixtures_dir" "$@"
        ;;
    *)
        local cpu
        if cpu=$(cross_cpu "$t"); then
            "qemu-$cpu" -L "/usr/$cpu-linux-gnu" "$dir/replay" "$@"
        else
            "$dir/replay" "$@"
        fi
        ;;
    esac
}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

shopt -s nullglob
fixtures=("$fixtures_dir"/*.replay)
shopt -u nullglob
if ((${#fixtures[@]} == 0)); then
    echo "cross-arch: no fixtures in $fixtures_dir" >&2
    exit 1
fi

failures=0
rows=()
for f in "${fixtures[@]}"; do
    name=$(basename "$f" .replay)
    # shellcheck disable=SC2053 # glob match on purpose
    if [[ $name == $expect_diverge ]]; then
        want_rc=1
    elif [[ $name == $expect_dispute ]]; then
        want_rc=3
    else
        want_rc=0
    fi
    reference=
    for t in $targets; do
        o=$out/$t.$name.json
        rc=0
        run "$t" verify --json --print-hashes "$f" >"$o" 2>"$out/$t.$name.err" || rc=$?
        verified=$(sed -n 's/^  "verified": \(.*\),\{0,1\}$/\1/p' "$o" | tr -d ',')
        final=$(sed -n 's/^  "final_hash": "\{0,1\}\([0-9a-z]*\)"\{0,1\},\{0,1\}$/\1/p' "$o")
        turns=$(sed -n 's/^  "turns": \([0-9]*\),\{0,1\}$/\1/p' "$o")
        div=$(sed -n '/"first_divergence": {/,/^  }/s/^    "turn": \([0-9]*\),\{0,1\}$/\1/p' "$o")
        status=ok
        if [[ $rc != "$want_rc" ]]; then
            status="FAIL: exit $rc, expected $want_rc"
        elif [[ ! -s $o ]]; then
            status="FAIL: no output"
        elif [[ -z $reference ]]; then
            reference=$t
        elif ! cmp -s "$out/$reference.$name.json" "$o"; then
            status="FAIL: output differs from $reference"
            diff "$out/$reference.$name.json" "$o" | head -n 8 >&2 || true
        fi
        if [[ $status != ok ]]; then
            failures=$((failures + 1))
            sed -n '1,5p' "$out/$t.$name.err" >&2
        fi
        rows+=("$(printf '%-26s %-24s %-8s %-9s %-5s %-16s %s' \
            "$t" "$name" "${verified:-?}" "${div:--}" "$turns" "${final:0:16}" "$status")")
    done
done

echo
printf '%-26s %-24s %-8s %-9s %-5s %-16s %s\n' \
    target fixture verified diverged turns "final hash" result
for r in "${rows[@]}"; do echo "$r"; done
echo
if ((failures)); then
    echo "cross-arch: $failures failure(s) ($((SECONDS - start)) s)" >&2
    exit 1
fi
echo "cross-arch: every per-turn hash identical on: $targets ($((SECONDS - start)) s)"
