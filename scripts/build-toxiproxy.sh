#!/usr/bin/env bash
# Build toxiproxy's server (tools/bin/toxiproxy-server) from the Go module proxy, for the
# ground-truth harness (bench/ground_truth), which injects one-way latency and bandwidth
# limits between the load generator and the prediction service.
#
#   bash scripts/build-toxiproxy.sh           build if missing or older than this script
#   bash scripts/build-toxiproxy.sh --force   rebuild anyway
#
# Why a build and not a download: only the Go module proxy is reachable from the machines
# this project runs on. v2.5.0 is the newest version the module path
# github.com/Shopify/toxiproxy/v2 resolves to there (later tags are not published under
# it); it declares go 1.17, so any recent Go builds it. tools/ is git-ignored.
#
# Environment: GRPC_OVERHEAD_GO   go command to use (default: go on PATH, then
#                                  /usr/local/go/bin/go)
# Exit codes: 0 built or up to date, 1 build failed, 2 no Go toolchain.
set -euo pipefail

readonly VERSION="v2.5.0"
readonly MODULE="github.com/Shopify/toxiproxy/v2/cmd/server"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="$root/tools/bin"
binary="$bin_dir/toxiproxy-server"
script="${BASH_SOURCE[0]}"

if [[ "${1:-}" != "--force" && -x "$binary" && "$binary" -nt "$script" ]]; then
    echo "[toxiproxy] up to date: $binary"
    exit 0
fi

# shellcheck source=scripts/go-toolchain.sh
source "$root/scripts/go-toolchain.sh"
find_go "toxiproxy" 1.17

echo "[toxiproxy] building $MODULE@$VERSION with $("$go_cmd" version)"
build_dir="$(mktemp -d)"
trap 'rm -rf "$build_dir"' EXIT
# go install names the binary after its folder ("server"): install into a scratch GOBIN,
# then move it to its real name in one step, so a failed build never leaves half a binary.
if ! GOBIN="$build_dir" GOFLAGS=-mod=mod "$go_cmd" install "$MODULE@$VERSION"; then
    echo "[toxiproxy] build failed (see above); the harness needs $binary" >&2
    exit 1
fi
mkdir -p "$bin_dir"
mv -f "$build_dir/server" "$binary"
echo "[toxiproxy] built $binary"
