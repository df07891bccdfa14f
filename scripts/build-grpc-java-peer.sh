#!/usr/bin/env bash
# Build the grpc-java peer (tools/grpc-java-peer/: grpc-java-peer.jar + lib/) from
# peers/grpc-java with Maven: a real grpc-java client/server traced by grpc-opentelemetry
# (gRFC A72), for the tests of calls between grpc-java, grpc-go and the Python service.
#
#   bash scripts/build-grpc-java-peer.sh           build if missing or older than its sources
#   bash scripts/build-grpc-java-peer.sh --force   rebuild anyway
#
# Artifacts come from Maven Central (grpc-java 1.85.1, OpenTelemetry Java 1.64.0, the
# version grpc-opentelemetry itself depends on), cached in ~/.m2; a warm build takes about
# 20 s. Needs a JDK (17+) and Maven (scripts/system-packages.sh installs Debian's).
# tools/ and peers/grpc-java/target/ are git-ignored.
#
# Exit codes: 0 built or up to date, 1 build failed, 2 no JDK or Maven.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source_dir="$root/peers/grpc-java"
out_dir="$root/tools/grpc-java-peer"
jar="$out_dir/grpc-java-peer.jar"
script="${BASH_SOURCE[0]}"

up_to_date() {
    [[ -f "$jar" && "$jar" -nt "$script" && "$jar" -nt "$source_dir/pom.xml" ]] || return 1
    local source
    while IFS= read -r source; do
        [[ "$jar" -nt "$source" ]] || return 1
    done < <(find "$source_dir/src" -name '*.java')
}

if [[ "${1:-}" != "--force" ]] && up_to_date; then
    echo "[grpc-java-peer] up to date: $jar"
    exit 0
fi
for tool in javac mvn; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "[grpc-java-peer] $tool is missing: run make system-packages (a JDK 17+ and Maven)" >&2
        exit 2
    fi
done

echo "[grpc-java-peer] building peers/grpc-java with $(mvn -v 2>/dev/null | head -1 | sed 's/\x1b\[[0-9;]*m//g')"
if ! (cd "$source_dir" && mvn -B -q -Dstyle.color=never package -DskipTests); then
    echo "[grpc-java-peer] build failed (see above); the grpc-java tests need $jar" >&2
    exit 1
fi
# Replace the whole folder in one step: a failed copy never leaves a mix of versions.
staging="$(mktemp -d "$root/tools/.grpc-java-peer.XXXXXX")"
cp "$source_dir/target/grpc-java-peer.jar" "$staging/"
cp -r "$source_dir/target/lib" "$staging/lib"
rm -rf "$out_dir"
mv "$staging" "$out_dir"
echo "[grpc-java-peer] built $jar"
