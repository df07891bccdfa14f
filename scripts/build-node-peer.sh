#!/usr/bin/env bash
# Install the Node peer (tools/node-peer) from peers/node: a real @grpc/grpc-js client/server
# traced by the OpenTelemetry Node SDK with its defaults (NodeSDK + the gRPC instrumentation,
# exporter from the environment: OTLP over HTTP/protobuf to port 4318), for the tests of what
# an untouched Node service sends.
#
#   bash scripts/build-node-peer.sh           install if missing or its lock file changed
#   bash scripts/build-node-peer.sh --force   reinstall anyway
#
# Packages come from the npm registry through `npm ci`, pinned by peers/node/package-lock.json
# (@grpc/grpc-js 1.14.7, @opentelemetry/sdk-node and instrumentation-grpc 0.223.0: the newest
# line that runs on Node 20; 0.300 and later need Node >= 22.15). tools/ is git-ignored; a
# stamp keyed on package.json and package-lock.json makes a second run a no-op, and main.js is
# copied next to node_modules on every run (node resolves packages from the script's folder).
#
# Exit codes: 0 installed or up to date, 1 install failed, 2 no Node.js/npm.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source_dir="$root/peers/node"
target="$root/tools/node-peer"
stamp="$target/.installed"

npm_cmd="$(command -v npm || true)"
if [[ -z "$npm_cmd" ]] || ! command -v node >/dev/null 2>&1; then
    echo "[node-peer] no Node.js/npm: install Node.js 20 or newer (Debian: nodejs npm)" >&2
    exit 2
fi

key="$(cat "$source_dir/package.json" "$source_dir/package-lock.json" "$source_dir/.npmrc" \
    "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
mkdir -p "$target"
# The program itself: copied every run (cheap), so an edit never needs a reinstall.
cp -f "$source_dir/main.js" "$target/main.js.tmp" && mv -f "$target/main.js.tmp" "$target/main.js"

if [[ "${1:-}" != "--force" && -d "$target/node_modules" && -f "$stamp" \
      && "$(cat "$stamp")" == "$key" ]]; then
    echo "[node-peer] up to date: $target"
    exit 0
fi

echo "[node-peer] npm ci in $target (node $(node --version))"
rm -f "$stamp"
cp -f "$source_dir/package.json" "$source_dir/package-lock.json" "$source_dir/.npmrc" "$target/"
if ! (cd "$target" && "$npm_cmd" ci --no-audit --no-fund --loglevel=error); then
    echo "[node-peer] npm ci failed (see above); the Node tests need $target/node_modules" >&2
    exit 1
fi
echo "$key" >"$stamp"
echo "[node-peer] installed $target"
