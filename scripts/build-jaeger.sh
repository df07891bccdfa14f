#!/usr/bin/env bash
# Build Jaeger v2 (tools/bin/jaeger) from the Go module proxy: the trace viewer the
# collector fans out to (collector/jaeger-fanout.yaml), the target of the explorer's and
# dashboards' trace links, and the source `grpc-overhead import jaeger` reads from.
#
#   bash scripts/build-jaeger.sh           build if missing or older than this script
#   bash scripts/build-jaeger.sh --force   rebuild anyway
#
# Why a wrapper module: v1.76.0 is the only Jaeger v2 release on the module proxy, and
# `go install github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0` fails to resolve: its
# module graph names github.com/Shopify/sarama versions that were retracted/renamed.
# A throwaway module that requires jaeger v1.76.0 and replaces sarama with v1.33.0
# resolves; GOSUMDB is off for that first resolution only (the checksum database is
# not reachable from the machines this project runs on). The module's UI assets are not
# published with it, so the binary serves the query APIs (16686) but a placeholder page.
# First build: about 3-5 minutes of compiling (run with nice); tools/ is git-ignored.
#
# Environment: GRPC_OVERHEAD_GO   go command to use (default: go on PATH, then
#                                  /usr/local/go/bin/go)
# Exit codes: 0 built or up to date, 1 build failed, 2 no Go toolchain.
set -euo pipefail

readonly VERSION="v1.76.0"
readonly MODULE="github.com/jaegertracing/jaeger"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="$root/tools/bin"
binary="$bin_dir/jaeger"
script="${BASH_SOURCE[0]}"

up_to_date() { [[ -x "$binary" && "$binary" -nt "$script" ]]; }

if [[ "${1:-}" != "--force" ]] && up_to_date; then
    echo "[jaeger] up to date: $binary"
    exit 0
fi

# shellcheck source=scripts/go-toolchain.sh
source "$root/scripts/go-toolchain.sh"
find_go "jaeger" 1.24

mkdir -p "$bin_dir"
# A test session and `make jaeger` at once would both build: serialize, then look again.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$bin_dir/.jaeger-build.lock"
    flock 9
    if [[ "${1:-}" != "--force" ]] && up_to_date; then
        echo "[jaeger] up to date (built by a concurrent run): $binary"
        exit 0
    fi
fi

start=$SECONDS
echo "[jaeger] building $MODULE/cmd/jaeger@$VERSION with $("$go_cmd" version)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat >"$work/go.mod" <<MOD
module grpc-overhead/jaeger-build

go 1.24

require $MODULE $VERSION

replace github.com/Shopify/sarama => github.com/Shopify/sarama v1.33.0
MOD
# A blank import keeps `go mod tidy` from dropping the requirement.
cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
GO
cd "$work"
export GOFLAGS="-mod=mod -buildvcs=false"
if ! GOSUMDB=off "$go_cmd" mod tidy </dev/null; then
    echo "[jaeger] module resolution failed (see above)" >&2
    exit 1
fi
# Build into the scratch folder, then move: a failed build never leaves half a binary.
# Stamp the version as Jaeger's own Makefile does (`jaeger version` prints it).
ldflags="-X $MODULE/internal/version.latestVersion=$VERSION"
if ! "$go_cmd" build -ldflags "$ldflags" -o "$work/jaeger" "$MODULE/cmd/jaeger" </dev/null; then
    echo "[jaeger] build failed (see above); the Jaeger tests and demo --jaeger need $binary" >&2
    exit 1
fi
mv -f "$work/jaeger" "$binary"
echo "[jaeger] built $binary ($(($(wc -c <"$binary") / 1048576)) MiB) in $((SECONDS - start)) s"
