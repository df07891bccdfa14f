#!/usr/bin/env bash
# Fetch the OpenTelemetry Java agent (io.opentelemetry.javaagent:opentelemetry-javaagent)
# into tools/otel-javaagent/opentelemetry-javaagent-VERSION.jar with Maven, for the tests
# that attach the real agent, with its default exporter settings, to the grpc-java peer
# (issue 24: OTLP over HTTP/protobuf to 4318 is what a Java service sends by default).
#
#   bash scripts/fetch-otel-javaagent.sh           fetch the versions that are missing
#   bash scripts/fetch-otel-javaagent.sh --force   fetch them again
#
# Two versions, pinned: 2.10.0 (the oldest 2.x the tests cover) and 2.33.1 (the newest 2.x
# Maven Central served on 2026-11-27). Cached: a jar already in tools/otel-javaagent/ is not
# fetched again (Maven keeps its own copy in ~/.m2 too). Needs Maven and a JDK (17+;
# scripts/system-packages.sh installs Debian's). tools/ is git-ignored.
#
# Exit codes: 0 fetched or present, 1 a fetch failed, 2 no Maven.
set -euo pipefail

VERSIONS=(2.10.0 2.33.1)
DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out_dir="$root/tools/otel-javaagent"
force="${1:-}"

missing=()
for version in "${VERSIONS[@]}"; do
    jar="$out_dir/opentelemetry-javaagent-$version.jar"
    if [[ "$force" == "--force" || ! -s "$jar" ]]; then
        missing+=("$version")
    fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "[otel-javaagent] present: ${VERSIONS[*]} in $out_dir"
    exit 0
fi
if ! command -v mvn >/dev/null 2>&1; then
    echo "[otel-javaagent] mvn is missing: run make system-packages (a JDK 17+ and Maven)" >&2
    exit 2
fi

mkdir -p "$out_dir"
for version in "${missing[@]}"; do
    # Into a staging folder first, then one rename: a failed fetch never leaves a partial jar.
    staging="$(mktemp -d "$out_dir/.fetch.XXXXXX")"
    echo "[otel-javaagent] fetching opentelemetry-javaagent $version"
    if ! (cd "$staging" && mvn -B -q -Dstyle.color=never "$DEPENDENCY_PLUGIN:copy" \
            -Dartifact="io.opentelemetry.javaagent:opentelemetry-javaagent:$version" \
            -DoutputDirectory="$staging"); then
        rm -rf "$staging"
        echo "[otel-javaagent] fetching $version failed (see above); the agent tests need it" >&2
        exit 1
    fi
    mv -f "$staging/opentelemetry-javaagent-$version.jar" "$out_dir/"
    rm -rf "$staging"
done
echo "[otel-javaagent] fetched ${missing[*]} into $out_dir"
