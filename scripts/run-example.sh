#!/usr/bin/env bash
# The main job: installs what anvil needs, builds it, turns the bundled example registry into a
# git repository, and reads it the way the daemon will: every document validated and pin-checked,
# with the commit each fact came from.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/install-deps.sh"

# RelWithDebInfo (-O2), the configuration the tests build: GCC 12 raises false -Wrestrict
# errors inside std::string at -O3.
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DANVIL_TESTS=OFF >/dev/null
cmake --build build/release -j "$(nproc)"

# A fixed author and date make the example registry's commit id reproducible.
registry=.anvil/example-registry
rm -rf "$registry"
mkdir -p "$registry"
cp -r examples/registry/. "$registry"/
(
  cd "$registry"
  export GIT_AUTHOR_NAME=anvil GIT_AUTHOR_EMAIL=anvil@localhost GIT_COMMITTER_NAME=anvil GIT_COMMITTER_EMAIL=anvil@localhost
  export GIT_AUTHOR_DATE="2026-11-30T00:00:00Z" GIT_COMMITTER_DATE="2026-11-30T00:00:00Z"
  git init -q -b main
  git add -A
  git commit -q -m "anvil example registry"
)

build/release/daemon/anvil registry check "$registry" --ref main --data-dir .anvil/data "$@"
