#!/usr/bin/env bash
# Installs the Debian packages the tests and the demo use, only where missing.
# chromium: the browser tests (tests/app/test_browser.py) and bench/app.py drive Debian's
# Chromium through Playwright, whose own browser download cannot work offline.
# default-jdk-headless + maven: the grpc-java peer (scripts/build-grpc-java-peer.sh).
# nodejs + npm: the Node peer (scripts/build-node-peer.sh; Node 20 or newer).
# openssl: docs/team.md's team block makes its certificate and secrets with it.
# Runs unattended (CI has no stdin); without root it says what to install instead.
set -euo pipefail

# command-to-check  debian-package
needed=(
  "faketime faketime"
  "ip iproute2"
  "tc iproute2"
  "chromium chromium"
  "curl curl"
  "openssl openssl"
  "javac default-jdk-headless"
  "mvn maven"
  "node nodejs"
  "npm npm"
)
missing=()
for pair in "${needed[@]}"; do
  read -r command package <<<"$pair"
  command -v "$command" >/dev/null 2>&1 || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" -ne 0 ]; then
  echo "Missing Debian packages: ${missing[*]}. Install them with: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "Installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
