#!/usr/bin/env bash
# Installs the Debian packages anvil builds and tests with (Slurm's daemons among them, for the test
# that runs a one-node cluster: tests/slurm), the npm packages of the web console
# (Chart.js, built into anvild) and of the tokenizer agreement test (tests/tokenizers).
# Idempotent: quiet and fast when everything is already there, so every entry point may call it.
#   --browser  also what the console's browser test needs: Debian's chromium, and playwright-core
#              (npm) to drive it
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
browser=false
[ "${1:-}" = "--browser" ] && browser=true

packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcpp-httplib-dev libsqlite3-dev libgit2-dev libspdlog-dev libfmt-dev
  libssl-dev libsystemd-dev catch2
  clang libclang-rt-14-dev libomp-14-dev
  python3 python3-numpy
  podman runc
  systemd
  mmdebstrap busybox-static
  munge slurmctld slurmd slurmrestd slurm-client slurm-wlm-jwt-plugin
)
$browser && packages+=(chromium)
# Node.js and npm: the machine's own when it has them (Debian's otherwise).
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages: ${missing[*]}; run this script as root (or install them)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm packages, exactly as each package-lock.json pins them; again only when the lock changed.
npm_ci() {
  local dir=$1
  if [ ! -f "$dir/node_modules/.package-lock.json" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    echo "install-deps: npm ci in ${dir#"$root"/}"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
}
npm_ci "$root/daemon/console"
# Hugging Face's tokenizers.js and a real SentencePiece tokenizer.json for the tokenizer agreement test.
npm_ci "$root/tests/tokenizers"
$browser && npm_ci "$root/tests/browser"
exit 0
