#!/usr/bin/env bash
# Build one of the Go peers under peers/ into tools/bin/, for the tests and benchmarks:
#
#   peers/grpc-go        -> grpc-go-peer: a real grpc-go client/server traced by gRPC's own
#                           OpenTelemetry plugin (gRFC A72) or by otelgrpc (grpc-go v1.85.0,
#                           go.opentelemetry.io/otel v1.47.0; otelgrpc v0.66.0, the last
#                           release that still emits message events)
#   peers/oidc-provider  -> oidc-provider: a real OpenID Connect provider (zitadel/oidc
#                           v3.52.0's example provider) for the app's login tests
#
#   bash scripts/build-go-peer.sh DIRECTORY NAME           build if missing or older than its sources
#   bash scripts/build-go-peer.sh DIRECTORY NAME --force   rebuild anyway
#
# Modules come from the Go module proxy, pinned by the peer's go.mod and go.sum. tools/ is
# git-ignored; the module cache makes rebuilds cheap (about 2 minutes cold on 2 cores,
# seconds warm).
#
# Environment: GRPC_OVERHEAD_GO   go command to use (default: go on PATH, then
#                                  /usr/local/go/bin/go)
# Exit codes: 0 built or up to date, 1 build failed, 2 no Go toolchain or bad arguments.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    echo "usage: bash scripts/build-go-peer.sh DIRECTORY NAME [--force]" >&2
    exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source_dir="$root/$1"
name="$2"
bin_dir="$root/tools/bin"
binary="$bin_dir/$name"
script="${BASH_SOURCE[0]}"
shift 2

up_to_date() {
    [[ -x "$binary" && "$binary" -nt "$script" ]] || return 1
    local source
    for source in "$source_dir"/go.mod "$source_dir"/go.sum "$source_dir"/*.go; do
        [[ "$binary" -nt "$source" ]] || return 1
    done
}

if [[ "${1:-}" != "--force" ]] && up_to_date; then
    echo "[$name] up to date: $binary"
    exit 0
fi

# shellcheck source=scripts/go-toolchain.sh
source "$root/scripts/go-toolchain.sh"
find_go "$name" 1.26

echo "[$name] building $source_dir with $("$go_cmd" version)"
mkdir -p "$bin_dir"
# Build next to the target, then rename: a failed build never leaves half a binary.
if ! (cd "$source_dir" && "$go_cmd" build -mod=readonly -trimpath -o "$binary.tmp" .); then
    rm -f "$binary.tmp"
    echo "[$name] build failed (see above); the tests need $binary" >&2
    exit 1
fi
mv -f "$binary.tmp" "$binary"
echo "[$name] built $binary"
