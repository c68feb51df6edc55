#!/usr/bin/env bash
# Runs the tests that need a real Slurm cluster: starts one (cluster.sh) in a directory of its own,
# runs anvil_tests' hidden [slurm-live] cases against it, and stops it whatever happens.
#   run.sh ANVIL_TESTS_BINARY [WORK_DIR]
# Exit 77 (skipped) with the reason where Slurm cannot start here.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tests=${1:?usage: run.sh ANVIL_TESTS_BINARY [WORK_DIR]}
work=${2:-$(mktemp -d /tmp/anvil-slurm.XXXXXX)}

bash "$here/cluster.sh" start "$work"
started=$?
trap 'bash "$here/cluster.sh" stop "$work"' EXIT
[[ $started == 0 ]] || exit "$started"
set -a
# shellcheck disable=SC1091
. "$work/env"
set +a
"$tests" "[slurm-live]"
