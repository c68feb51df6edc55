#!/usr/bin/env bash
# Installs the Debian packages anvil builds and tests with. Idempotent: quiet and fast when
# everything is already there, so every entry point may call it.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcpp-httplib-dev libsqlite3-dev libgit2-dev libspdlog-dev libfmt-dev
  libssl-dev libsystemd-dev catch2
  clang libclang-rt-14-dev libomp-14-dev
  python3 python3-numpy
  podman runc
  systemd
  mmdebstrap busybox-static
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run this script as root (or install them)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
