#!/usr/bin/env bash
# Build the grpc-overhead OpenTelemetry Collector (collector/dist/otelcol-grpc-overhead)
# from collector/manifest.yaml with the official builder (ocb).
#
#   bash collector/build.sh           build if the binary is missing or older than its inputs
#   bash collector/build.sh --force   rebuild anyway
#
# Why a script and not a download: only the Go module proxy is reachable from
# the machines this project runs on, so the collector is compiled from pinned
# modules. The builder is installed into collector/dist/bin (git-ignored); the
# normal Go module and build caches are reused, so a rebuild after a manifest
# change only recompiles what changed. A second run with nothing changed is a
# no-op that takes well under a second.
#
# Environment:
#   GRPC_OVERHEAD_GO   path of the go command to use (default: go on PATH,
#                      then /usr/local/go/bin/go)
#
# Exit codes: 0 built or up to date, 1 build failed, 2 no usable Go toolchain.
set -euo pipefail

readonly BUILDER_VERSION="v0.161.0"
readonly BUILDER_MODULE="go.opentelemetry.io/collector/cmd/builder"
readonly DIST_NAME="otelcol-grpc-overhead"
# Every collector v0.161.0 module declares "go 1.26.0" in its go.mod.
readonly GO_MIN_MAJOR=1 GO_MIN_MINOR=26
readonly INTAKE_HINT="send OTLP straight to the intake on port 4327 (GRPC_OVERHEAD_INTAKE_ENDPOINT)"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dist="$here/dist"
binary="$dist/$DIST_NAME"
builder="$dist/bin/builder"
force=0

for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        -h | --help)
            sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "build.sh: unknown argument: $arg (use --force or --help)" >&2
            exit 1
            ;;
    esac
done

log() { printf '[collector] %s\n' "$*"; }

up_to_date() {
    [[ -x "$binary" && "$binary" -nt "$here/manifest.yaml" && "$binary" -nt "$here/build.sh" ]]
}

if [[ $force -eq 0 ]] && up_to_date; then
    log "up to date: $binary"
    exit 0
fi

# --- find Go ------------------------------------------------------------------
go_bin="${GRPC_OVERHEAD_GO:-}"
if [[ -z "$go_bin" ]]; then
    go_bin="$(command -v go || true)"
    if [[ -z "$go_bin" && -x /usr/local/go/bin/go ]]; then
        go_bin=/usr/local/go/bin/go
    fi
fi
if [[ -z "$go_bin" || ! -x "$go_bin" ]]; then
    echo "Go not found: install Go >= $GO_MIN_MAJOR.$GO_MIN_MINOR or $INTAKE_HINT." >&2
    exit 2
fi
go_version="$("$go_bin" env GOVERSION 2>/dev/null || true)" # e.g. go1.26.8
if [[ ! "$go_version" =~ ^go([0-9]+)\.([0-9]+) ]]; then
    echo "Go not usable: '$go_bin env GOVERSION' printed '$go_version'; install Go >= $GO_MIN_MAJOR.$GO_MIN_MINOR or $INTAKE_HINT." >&2
    exit 2
fi
major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
if ((major < GO_MIN_MAJOR || (major == GO_MIN_MAJOR && minor < GO_MIN_MINOR))); then
    echo "Go too old: $go_version at $go_bin; the collector $BUILDER_VERSION modules need Go >= $GO_MIN_MAJOR.$GO_MIN_MINOR." >&2
    echo "Install a newer Go, or run with GOTOOLCHAIN=auto to let go fetch it, or $INTAKE_HINT." >&2
    exit 2
fi
# The builder runs "go" from PATH for "go get" and "go build".
export PATH="$(dirname "$go_bin"):$PATH"
# dist/ lies inside this repository's work tree: skip VCS stamping so the build
# does not depend on git being installed or trusting the checkout's owner.
if [[ " ${GOFLAGS:-} " != *" -buildvcs"* ]]; then
    export GOFLAGS="${GOFLAGS:+$GOFLAGS }-buildvcs=false"
fi

mkdir -p "$dist/bin"

# Two builds at once (a test session and `make collector`) would write the same
# files: serialize them, then look again, as the other one may have built it.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$dist/.build.lock"
    if ! flock -n 9; then
        log "another build is running; waiting for it"
        flock 9
    fi
    if [[ $force -eq 0 ]] && up_to_date; then
        log "up to date (built by a concurrent run): $binary"
        exit 0
    fi
fi

start=$SECONDS
log "using $go_version ($go_bin)"

# --- the builder --------------------------------------------------------------
if [[ ! -x "$builder" ]] || [[ "$("$builder" version 2>&1 || true)" != *"$BUILDER_VERSION"* ]]; then
    log "installing ocb $BUILDER_VERSION into $dist/bin"
    GOBIN="$dist/bin" "$go_bin" install "$BUILDER_MODULE@$BUILDER_VERSION" </dev/null
fi

# --- the collector ------------------------------------------------------------
log "building $DIST_NAME from manifest.yaml (first build: a few minutes, mostly compiling)"
cd "$here"
if ! "$builder" --config manifest.yaml </dev/null; then
    echo "[collector] build failed; see the builder output above" >&2
    exit 1
fi
touch "$binary" # newer than its inputs even if the builder kept an old file
size_mib=$(($(wc -c <"$binary") / 1048576))
log "built $binary (${size_mib} MiB) in $((SECONDS - start)) s"
