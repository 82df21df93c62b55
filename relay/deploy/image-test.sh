#!/usr/bin/env bash
# Builds the relay's container image from relay/Dockerfile and runs it for
# real with podman, without a registry: the Dockerfile's `prebuilt` target
# (a relay binary built on this host) on a Debian bookworm root filesystem
# bootstrapped from the host's package mirror and cached outside the clone.
# Then it plays a match through the container with native peers and checks
# what an operator relies on. Run from anywhere inside the repository;
# `--help` says what is checked. CI runs it from .ci/run.
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
    cat <<'EOF'
Usage: relay/deploy/image-test.sh [--build] [--relay-bin PATH] [--peer PATH]
                                  [--replay PATH] [--cache-dir DIR] [--turns N]

Builds relay/Dockerfile's `prebuilt` target with podman (--format docker,
--pull=never) on a cached Debian bookworm base, runs it (runtime runc,
explicit --ulimit values within this machine's hard limits, the game port
and the metrics port published on 127.0.0.1, a host directory as /replays),
and checks, each bounded in time:
  1. GET /health answers 200 through the published metrics port;
  2. two native peers play a match of N turns through the published game
     port and agree on the final hash;
  3. the image's HEALTHCHECK passes (podman healthcheck run);
  4. `podman stop -t T` (T above the image's --grace-s) stops it with exit
     status 0 within the grace period;
  5. the recording on the mounted volume verifies (replay verify).

Options:
  --build           cargo build --release --locked the relay, peer and replay
                    binaries first, niced (otherwise they must exist)
  --relay-bin PATH  the relay copied into the image (default target/release/relay)
  --peer PATH       the native peer (default target/release/peer)
  --replay PATH     the replay tool (default target/release/replay)
  --cache-dir DIR   where the base root filesystem is cached (default
                    $LOCKSTEP_CI_CACHE or /var/cache/lockstep-ci); delete
                    bookworm-minbase.tar there to bootstrap it afresh
  --turns N         turns of the match (default 50: 5 s)
  -h, --help        this text

The base: `debootstrap --variant=minbase bookworm` from the mirror apt uses,
saved as DIR/bookworm-minbase.tar and imported as
localhost/lockstep-ci/debian:bookworm-minbase (passed as RUNTIME_BASE).
Needs root (debootstrap, rootful podman), podman, runc and debootstrap.
With CI=true missing packages are installed with apt-get and anything that
stops the test is a failure; otherwise missing tools are explained and the
script exits 77 (skipped).

Exit status: 0 passed, 1 failed, 2 usage, 77 skipped (not under CI=true).
EOF
}

die() {
    echo "image-test: $*" >&2
    exit 1
}
# A missing prerequisite: a failure under CI=true, a skip elsewhere.
unavailable() {
    echo "image-test: $*" >&2
    if [[ ${CI:-} == true ]]; then
        echo "image-test: CI=true: failing rather than skipping" >&2
        exit 1
    fi
    echo "image-test: skipped (set CI=true to make this a failure)" >&2
    exit 77
}
step() { echo "image-test: [$((SECONDS - t0))s] $*"; }

build=0
relay_bin=target/release/relay
peer=target/release/peer
replay=target/release/replay
cache_dir=${LOCKSTEP_CI_CACHE:-/var/cache/lockstep-ci}
turns=50
while (($#)); do
    case $1 in
        --build) build=1 ;;
        --relay-bin | --peer | --replay | --cache-dir | --turns)
            (($# >= 2)) || {
                echo "image-test: $1 needs a value" >&2
                exit 2
            }
            case $1 in
                --relay-bin) relay_bin=$2 ;;
                --peer) peer=$2 ;;
                --replay) replay=$2 ;;
                --cache-dir) cache_dir=$2 ;;
                --turns) turns=$2 ;;
            esac
            shift
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            echo "image-test: unknown argument '$1' (see --help)" >&2
            exit 2
            ;;
    esac
    shift
done
[[ $turns =~ ^[1-9][0-9]*$ ]] || {
    echo "image-test: --turns wants a positive number, not '$turns'" >&2
    exit 2
}
t0=$SECONDS

# --- Prerequisites -----------------------------------------------------------

((EUID == 0)) || unavailable "needs root: debootstrap and rootful podman (run it as root or under sudo)"
missing=()
for tool in podman runc debootstrap; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
    if [[ ${CI:-} == true ]]; then
        step "installing ${missing[*]} with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 ||
            { apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; } ||
            die "apt-get could not install ${missing[*]}"
    else
        unavailable "missing ${missing[*]}: apt-get install -y podman runc debootstrap"
    fi
fi

if ((build)); then
    step "cargo build --release (relay, peer, replay; at the lowest CPU priority)"
    nice -n 19 cargo build --quiet --release --locked -p lockstep-relay --bin relay \
        -p lockstep-net --bin peer -p lockstep-replays --bin replay
fi
for bin in "$relay_bin" "$peer" "$replay"; do
    [[ -x $bin ]] || die "no executable $bin (build it, or pass --build)"
done
# The image's base has the glibc of Debian bookworm: a binary linked on a
# newer one would not start in it.
if ldd "$relay_bin" 2>&1 | grep -q 'not found'; then
    die "$relay_bin lacks libraries on this host: $(ldd "$relay_bin" 2>&1 | grep 'not found')"
fi

# Limits passed to the container: none above this machine's hard limits.
hard_nofile=$(ulimit -Hn)
hard_nproc=$(ulimit -Hu)
cap() { if [[ $1 == unlimited ]] || (($1 > $2)); then echo "$2"; else echo "$1"; fi; }
nofile=$(cap "$hard_nofile" 4096)
nproc=$(cap "$hard_nproc" 1024)

# --- Cleanup -----------------------------------------------------------------

run_id=$$-$RANDOM
image=localhost/lockstep-relay:image-test-$run_id
container=lockstep-relay-image-test-$run_id
work=$(mktemp -d)
rootfs=
cleanup() {
    local rc=$?
    if podman container exists "$container" 2>/dev/null; then
        if ((rc != 0)); then
            echo "image-test: the container's log:" >&2
            podman logs "$container" 2>&1 | tail -n 40 >&2 || true
        fi
        podman rm -f -t 0 "$container" >/dev/null 2>&1 || true
    fi
    podman rmi -f "$image" >/dev/null 2>&1 || true
    # An interrupted bootstrap leaves no half-made base behind.
    [[ -z $rootfs ]] || rm -rf "$rootfs" "$base_tar.tmp"
    jobs -p | xargs -r kill 2>/dev/null || true
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- The base image ----------------------------------------------------------

base=localhost/lockstep-ci/debian:bookworm-minbase
base_tar=$cache_dir/bookworm-minbase.tar
mkdir -p "$cache_dir"
# One bootstrap at a time on this machine; another run waits for it.
exec 9>"$cache_dir/lock"
flock -w 600 9 || die "$cache_dir/lock held for 10 minutes"
if ! podman image exists "$base"; then
    if [[ ! -s $base_tar ]]; then
        mirror=$(apt-cache policy | awk '$3 == "bookworm/main" && $2 ~ /^https?:/ { print $2; exit }')
        [[ -n $mirror ]] || die "no bookworm/main mirror in apt's sources (apt-cache policy)"
        step "bootstrapping the base (debootstrap --variant=minbase bookworm $mirror, once per machine)"
        rootfs=$(mktemp -d "$cache_dir/rootfs.XXXXXX")
        # The image's / (mktemp makes it 0700: closed to the image's user).
        chmod 755 "$rootfs"
        nice -n 19 debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
            tail -n 20 "$work/debootstrap.log" >&2
            rm -rf "$rootfs"
            die "debootstrap failed (log above)"
        }
        # What an image does not need: downloaded packages, indexes, docs.
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
            "$rootfs"/usr/share/doc "$rootfs"/usr/share/man "$rootfs"/usr/share/info
        tar --numeric-owner -C "$rootfs" -cf "$base_tar.tmp" .
        rm -rf "$rootfs"
        rootfs=
        mv "$base_tar.tmp" "$base_tar"
    fi
    step "importing $base_tar as $base"
    podman import --quiet \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' "$base_tar" "$base" >/dev/null ||
        die "podman import $base_tar failed"
fi
flock -u 9

# --- Build -------------------------------------------------------------------

# A context holding only the binary, where the Dockerfile's `prebuilt`
# target looks for it: not the whole workspace and its target directory.
# No intermediate images (--layers=false): a failed build leaves none behind.
mkdir -p "$work/context/target/release"
cp "$relay_bin" "$work/context/target/release/relay"
step "podman build --target prebuilt on $base"
podman build --quiet --format docker --pull=never --layers=false --runtime runc \
    --target prebuilt --build-arg "RUNTIME_BASE=$base" \
    -f relay/Dockerfile -t "$image" "$work/context" >"$work/build.log" 2>&1 || {
    cat "$work/build.log" >&2
    die "podman build failed (log above)"
}
grace=$(podman image inspect --format '{{json .Config.Cmd}}' "$image" |
    grep -o -- '--grace-s=[0-9]*' | cut -d= -f2)
[[ -n $grace ]] || die "the image's CMD sets no --grace-s"
podman image inspect --format '{{json .Config.Healthcheck}}' "$image" | grep -q /health ||
    die "the image has no health check (built without --format docker?)"

# --- Run ---------------------------------------------------------------------

# Podman schedules the image's periodic health checks with systemd timers;
# without systemd (a container host, a CI box) it logs that it cannot, and
# runs none: step 3 runs the check itself. Shows podman's other complaints.
quiet_systemd() {
    grep -v 'unable to get systemd connection' "$1" >&2 || true
}

recordings=$work/replays
mkdir -p "$recordings"
step "podman run (nofile $nofile, nproc $nproc; hard limits $hard_nofile, $hard_nproc)"
# Host ports chosen by podman (127.0.0.1 only: an open-mode relay); `:U`
# gives the volume to the image's user (uid 10001).
podman run --runtime runc -d --name "$container" \
    --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" \
    -p 127.0.0.1::7777/udp -p 127.0.0.1::9000/tcp \
    -v "$recordings:/replays:U" "$image" >/dev/null 2>"$work/run.err" || {
    cat "$work/run.err" >&2
    die "podman run failed"
}
quiet_systemd "$work/run.err"
host_port() {
    podman port "$container" "$1" | head -n 1 | sed 's/.*://'
}
game_port=$(host_port 7777/udp)
metrics_port=$(host_port 9000/tcp)
[[ -n $game_port && -n $metrics_port ]] || die "podman published no ports: $(podman port "$container")"

# The status line of GET /health on the published metrics port.
health_status() {
    local line
    exec 3<>"/dev/tcp/127.0.0.1/$metrics_port" || return 1
    printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    IFS= read -r -t 2 line <&3 || true
    exec 3<&-
    echo "${line%$'\r'}"
}
step "waiting for GET /health on 127.0.0.1:$metrics_port"
status=
for _ in $(seq 100); do
    status=$(health_status 2>/dev/null || true)
    [[ $status == *" 200 "* ]] && break
    [[ $(podman inspect --format '{{.State.Running}}' "$container") == true ]] ||
        die "the container exited before serving /health"
    sleep 0.2
done
[[ $status == *" 200 "* ]] || die "GET /health: '$status' after 20 s, not 200"

step "a match of $turns turns through 127.0.0.1:$game_port (2 native peers)"
pids=()
for seed in 1 2; do
    timeout 120 "$peer" --relay "127.0.0.1:$game_port" --match image-test --players 2 \
        --turns "$turns" --seed "$seed" --timeout-s 100 --json \
        >"$work/peer$seed.json" 2>"$work/peer$seed.log" &
    pids+=($!)
done
for seed in 1 2; do
    wait "${pids[$((seed - 1))]}" || {
        cat "$work/peer$seed.log" >&2
        die "peer $seed failed (its log above)"
    }
done
hash_of() { grep -o '"final_hash": *"[0-9a-f]*"' "$1" | grep -o '[0-9a-f]\{16,\}'; }
hash1=$(hash_of "$work/peer1.json") || die "no final_hash in peer 1's summary: $(cat "$work/peer1.json")"
hash2=$(hash_of "$work/peer2.json") || die "no final_hash in peer 2's summary"
[[ $hash1 == "$hash2" ]] || die "the peers disagree: $hash1 against $hash2"

step "the image's health check"
podman healthcheck run "$container" >/dev/null || die "podman healthcheck run: unhealthy"
health=$(podman inspect --format '{{.State.Health.Status}}' "$container" 2>/dev/null ||
    podman inspect --format '{{.State.Healthcheck.Status}}' "$container")
[[ $health == healthy ]] || die "health status '$health' after a passing check"

step "podman stop -t $((grace + 5)) (SIGTERM; the image's --grace-s is $grace)"
stop_start=$SECONDS
podman stop -t "$((grace + 5))" "$container" >/dev/null 2>"$work/stop.err" || {
    cat "$work/stop.err" >&2
    die "podman stop failed"
}
quiet_systemd "$work/stop.err"
stop_secs=$((SECONDS - stop_start))
exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$container")
((exit_code == 0)) || die "the relay exited with status $exit_code after SIGTERM, not 0"
((stop_secs < grace)) || die "stopping took $stop_secs s, not within the grace period ($grace s)"
# A drain, not a kill: the relay logged it and its end.
podman logs "$container" >"$work/relay.log" 2>&1
for event in draining stopped; do
    grep -q "\"event\":\"$event\"" "$work/relay.log" ||
        die "no \"$event\" event in the relay's log after SIGTERM"
done

step "the recording on the mounted volume"
shopt -s nullglob
files=("$recordings"/image-test-*.lsr)
((${#files[@]} == 1)) || die "expected one recording of match image-test in the volume, found: $(ls -A "$recordings")"
"$replay" verify "${files[0]}" >"$work/verify.log" 2>&1 || {
    cat "$work/verify.log" >&2
    die "replay verify ${files[0]##*/} failed"
}
step "ok: /health 200, $turns turns agreed (${hash1:0:16}), healthy, stopped in ${stop_secs} s with status 0, ${files[0]##*/} verifies"
