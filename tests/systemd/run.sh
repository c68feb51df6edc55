#!/usr/bin/env bash
# anvild under a real systemd (issue 23). Boots systemd as PID 1 in a podman container made from
# Debian's packages (mmdebstrap), installs anvil into it with `cmake --install` and its sysusers.d
# and tmpfiles.d entries, and checks what the unit promises with systemctl:
#   start (active only after READY=1, the stable endpoint answers the example model), reload (a
#   changed configuration applied, a broken one refused while the service stays up), the watchdog
#   (a stopped anvild killed and restarted, the restarted one adopting the engine), stop (within
#   TimeoutStopSec, engines left running) and start/restart adopting them, the anvil user, no
#   writes outside its directories, its files closed to other users, the unit's exposure as
#   systemd-analyze security rates it, and rootless podman running a container under every
#   directive of the unit (the container engines' path).
#
# usage: tests/systemd/run.sh [build-dir (build/gcc)]
# Skips, saying why, where no container with systemd can start (not root, no podman, no Debian
# mirror for mmdebstrap). The root image is kept between runs (podman image anvil-systemd-test).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build/gcc}" && pwd)
work=$build/systemd-test
name=anvil-systemd-test-$$
max_exposure=3.5

passed=0
failed=0
ok() { echo "  ok    $1"; passed=$((passed + 1)); }
bad() { echo "  FAIL  $1${2:+: $2}"; failed=$((failed + 1)); }
# check WHAT COMMAND...: passes when COMMAND exits 0.
check() {
  local what=$1
  shift
  if "$@" >/dev/null 2>&1; then ok "$what"; else bad "$what"; fi
}
skip() {
  echo "== systemd: skipped: $*"
  exit 0
}

echo "== systemd: anvild.service under systemd as PID 1 in a container"
[ "$(id -u)" -eq 0 ] || skip "needs root, to run podman with systemd as PID 1"
command -v podman >/dev/null || skip "podman is not installed"
command -v mmdebstrap >/dev/null || skip "mmdebstrap is not installed"
[ -x "$build/daemon/anvild" ] || { echo "no anvild in $build: build first" >&2; exit 1; }

mkdir -p "$work"
# podman as this kind of machine runs it: runc, cgroupfs, no default ulimits (the host's hard
# limits are lower than podman's defaults).
printf '[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\nruntime = "runc"\n' >"$work/containers.conf"
pm() { CONTAINERS_CONF=$work/containers.conf podman --runtime runc --cgroup-manager cgroupfs "$@"; }
inside() { pm exec "$name" "$@"; }

# --- the root: this host's Debian release, systemd, and the libraries anvil links ------------
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$suite" ] || skip "this host's /etc/os-release names no Debian release"
mapfile -t libraries < <(for b in anvild anvil anvil-engine; do ldd "$build/daemon/$b" "$build/engine/$b" 2>/dev/null; done |
  awk '/=> \//{print $3}' | sort -u | while read -r f; do dpkg -S "$(readlink -f "$f")" 2>/dev/null || dpkg -S "$f" 2>/dev/null; done |
  cut -d: -f1 | sort -u)
# podman, fuse-overlayfs and catatonit: rootless podman under the unit's sandbox (the last check).
packages="systemd,systemd-sysv,dbus,curl,procps,podman,fuse-overlayfs,catatonit,$(IFS=,; echo "${libraries[*]}")"
image=localhost/anvil-systemd-test:$(echo "$suite $packages" | sha256sum | cut -c1-16)
if ! pm image exists "$image"; then
  echo "   building the root ($suite, minbase + $packages)"
  rm -f "$work/root.tar"
  mmdebstrap --variant=minbase --include="$packages" "$suite" "$work/root.tar" >"$work/mmdebstrap.log" 2>&1 ||
    skip "mmdebstrap could not build a $suite root (see $work/mmdebstrap.log)"
  pm import "$work/root.tar" "$image" >/dev/null 2>&1 || skip "podman could not import the root"
  rm -f "$work/root.tar"
fi

# --- what gets installed: anvil, the example registry (one embedded recipe), the model --------
stage=$work/stage
rm -rf "$stage"
DESTDIR=$stage cmake --install "$build" >/dev/null || { echo "cmake --install failed" >&2; exit 1; }
registry=$stage/var/lib/anvil/example-registry
mkdir -p "$registry"
cp -r "$root/examples/registry/." "$registry/"
# f32 alone among the embedded recipes: the first default comes up in about a minute, and no other
# qualification starts or stops engines while the watchdog and adoption are checked.
rm -f "$registry"/recipes/anvil-tiny-llama-{bf16,q8,f32-draft-layers}-cpu.json
(
  cd "$registry"
  export GIT_AUTHOR_NAME=anvil GIT_AUTHOR_EMAIL=anvil@localhost GIT_COMMITTER_NAME=anvil GIT_COMMITTER_EMAIL=anvil@localhost
  git init -q -b main && git add -A && git commit -q -m "anvil example registry, f32 only"
)
model=$stage/var/lib/anvil/models/anvil-tiny-llama-early-exit-seed1
"$build/engine/anvil-engine" make-model --out "$model" --preset small --layers 8 --early-exit 1 --seed 1 >/dev/null
pinned=$(sed -n 's/.*"digest": "\(sha256:[0-9a-f]*\)".*/\1/p' "$root/examples/registry/recipes/anvil-tiny-llama-f32-cpu.json")
[ "$("$build/daemon/anvil" model digest "$model")" = "$pinned" ] || { echo "the example model's digest is not the pinned $pinned" >&2; exit 1; }
# The example configuration with the installed paths.
mkdir -p "$stage/etc/anvil"
python3 - "$root/examples/anvild.json" "$stage/etc/anvil/anvild.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["sources"][0]["url"] = "/var/lib/anvil/example-registry"
c.update(data_dir="/var/lib/anvil", model_root="/var/lib/anvil/models", cache_root="/var/cache/anvil")
json.dump(c, open(sys.argv[2], "w"), indent=2)
EOF
# The unit's watchdog is 60 s; 10 s here, so that the test does not wait a minute for it.
mkdir -p "$stage/etc/systemd/system/anvild.service.d"
printf '[Service]\nWatchdogSec=10s\n' >"$stage/etc/systemd/system/anvild.service.d/test-watchdog.conf"

# wait_for SECONDS COMMAND...: until COMMAND succeeds, or fails after SECONDS.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 1
  done
}

# --- the container --------------------------------------------------------------------------
# --privileged: systemd sets up each unit's sandbox (namespaces, device and syscall filters) with
# the kernel features it has on a real machine. No network: everything is on its own loopback.
pm rm -f "$name" >/dev/null 2>&1
started=$(pm run -d --name "$name" --privileged --systemd=always --network=none "$image" /sbin/init 2>&1) ||
  skip "a container with systemd as PID 1 cannot start here: $started"
# ANVIL_SYSTEMD_KEEP=1 leaves the container running, to look into by hand (podman exec -it NAME bash).
if [ -n "${ANVIL_SYSTEMD_KEEP:-}" ]; then
  trap 'echo "   container left running: CONTAINERS_CONF=$work/containers.conf podman exec -it $name bash"' EXIT
else
  trap 'pm rm -f "$name" >/dev/null 2>&1' EXIT
fi
booted() {
  state=$(inside timeout 60 systemctl is-system-running --wait 2>/dev/null)
  [ "$state" = running ] || [ "$state" = degraded ]
}
state=
wait_for 120 booted || skip "systemd in the container did not finish booting (${state:-no answer})"
pm cp "$stage/." "$name:/" || { echo "podman cp failed" >&2; exit 1; }
inside systemd-sysusers >/dev/null
inside systemd-tmpfiles --create >/dev/null
inside chown -R anvil:anvil /var/lib/anvil
inside systemctl daemon-reload

unit_value() { inside systemctl show -p "$1" --value anvild; }
# The engine processes (the embedded driver's anvil-engine children), by pid.
engines() { inside pgrep -u anvil -f '^/usr/local/bin/anvil-engine serve' | sort | tr '\n' ' '; }
endpoint_answers() {
  inside curl -sf -m 30 http://127.0.0.1:7701/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"anvil-default","messages":[{"role":"user","content":"hello"}],"max_tokens":4}' | grep '"choices"' >/dev/null
}
# grep reads to the end (no -q): an early exit would fail journalctl with SIGPIPE under pipefail.
journal_has() { inside journalctl -u anvild -o cat --no-pager | grep -iF "$1" >/dev/null; }

# --- start ----------------------------------------------------------------------------------
inside touch /run/anvil-test-marker
if inside timeout 300 systemctl start anvild; then ok "systemctl start anvild returns"; else bad "systemctl start anvild returns"; fi
check "anvild is active (running)" test "$(unit_value ActiveState) $(unit_value SubState)" = "active running"
check "Type=notify: anvild's status line reached systemd" test -n "$(unit_value StatusText)"
# Type=notify: start returns at READY=1, which anvild sends after its first pass; so the API and
# the first pass's answer are there the moment start returns, with no waiting.
check "the API answers the moment start returned (READY=1 came after the first pass)" inside curl -sf -m 5 http://127.0.0.1:7700/api/v1/status
lines=$(inside journalctl -u anvild -o cat --no-pager)
ready_line=$(grep -nF "anvild ready:" <<<"$lines" | head -1 | cut -d: -f1)
started_line=$(grep -nE "^Started anvild" <<<"$lines" | head -1 | cut -d: -f1)
check "systemd reported it started only after anvild's ready line" test -n "$ready_line" -a -n "$started_line" -a "${ready_line:-0}" -lt "${started_line:-0}"
if wait_for 300 endpoint_answers; then ok "the stable endpoint answers the example model"; else bad "the stable endpoint answers the example model"; fi

# --- who it runs as, what it can write, who can read its files --------------------------------
pid=$(unit_value MainPID)
check "anvild runs as the anvil user" test "$(inside ps -o user= -p "$pid" | tr -d ' ')" = anvil
uid=$(inside id -u anvil)
gid=$(inside id -g anvil)
as_service() { inside nsenter --target "$pid" --mount --setuid "$uid" --setgid "$gid" -- sh -c "$1"; }
check "it can write its state directory" as_service 'touch /var/lib/anvil/probe && rm /var/lib/anvil/probe'
for path in /usr/local/bin/probe /etc/anvil/probe /var/lib/probe /root/probe; do
  if as_service "touch $path" >/dev/null 2>&1; then bad "it cannot write $path"; else ok "it cannot write $path"; fi
done
check "its state directory is closed to other users ($(inside stat -c %A /var/lib/anvil))" test "$(inside stat -c %A /var/lib/anvil | cut -c8-10)" = "---"
if inside runuser -u nobody -- cat /var/lib/anvil/api-token >/dev/null 2>&1; then bad "another user cannot read its API token"; else ok "another user cannot read its API token"; fi
open_files=$(inside find /var/lib/anvil /var/cache/anvil /run/anvil -newer /run/anvil-test-marker -perm /o=rwx ! -type l 2>/dev/null)
check "nothing it created is open to other users" test -z "$open_files"
[ -z "$open_files" ] || echo "$open_files" | head -5 | sed 's/^/        /'

# --- reload -----------------------------------------------------------------------------------
inside cp /etc/anvil/anvild.json /etc/anvil/anvild.json.good
inside sed -i 's/"reconcile_interval_seconds": 2/"reconcile_interval_seconds": 3/' /etc/anvil/anvild.json
inside systemctl reload anvild
if wait_for 60 journal_has "configuration reloaded"; then ok "systemctl reload applies a changed configuration"; else bad "systemctl reload applies a changed configuration"; fi
check "the reload kept the same anvild" test "$(unit_value MainPID)" = "$pid"
inside sh -c 'echo "{ not json" > /etc/anvil/anvild.json'
inside systemctl reload anvild
if wait_for 60 journal_has "reload refused, keeping the running configuration"; then ok "a broken configuration is refused"; else bad "a broken configuration is refused"; fi
check "after the refused reload anvild is still active, the same process" test "$(unit_value ActiveState) $(unit_value MainPID)" = "active $pid"
if wait_for 30 endpoint_answers; then ok "and the endpoint still answers"; else bad "and the endpoint still answers"; fi
inside mv /etc/anvil/anvild.json.good /etc/anvil/anvild.json
inside systemctl reload anvild

# --- the watchdog -----------------------------------------------------------------------------
serving=$(engines)
check "one engine serves the default" test "$(wc -w <<<"$serving")" -eq 1
restarts=$(unit_value NRestarts)
stopped_at=$SECONDS
inside kill -STOP "$pid"
restarted() { [ "$(unit_value MainPID)" != "$pid" ] && [ "$(unit_value MainPID)" != 0 ] && [ "$(unit_value ActiveState)" = active ]; }
# WatchdogSec (10 s here), the abort, RestartSec (5 s), then a start up to READY=1.
if wait_for 90 restarted; then ok "a stopped anvild is killed by the watchdog and restarted ($((SECONDS - stopped_at)) s)"; else bad "a stopped anvild is killed by the watchdog and restarted"; fi
check "systemd counted one restart" test "$(unit_value NRestarts)" -eq $((restarts + 1))
if wait_for 15 journal_has "Watchdog timeout"; then ok "systemd logged the watchdog timeout"; else bad "systemd logged the watchdog timeout"; fi
sleep 5  # a pass or two of the new anvild
check "the restarted anvild adopted the engine: same process, no second one ($serving)" test -n "$serving" -a "$(engines)" = "$serving"
if wait_for 60 endpoint_answers; then ok "the endpoint answers after the restart"; else bad "the endpoint answers after the restart"; fi

# --- stop, start, restart -----------------------------------------------------------------------
stop_started=$SECONDS
inside timeout 120 systemctl stop anvild
took=$((SECONDS - stop_started))
check "systemctl stop finishes within TimeoutStopSec (${took} s < $(unit_value TimeoutStopUSec))" test "$took" -lt 90
check "anvild is inactive" test "$(unit_value ActiveState)" = inactive
check "the engine keeps running without anvild (KillMode=process)" test -n "$serving" -a "$(engines)" = "$serving"
inside timeout 300 systemctl start anvild
sleep 5
check "systemctl start adopts it: the same engine, no second one" test -n "$serving" -a "$(engines)" = "$serving"
if wait_for 60 endpoint_answers; then ok "the endpoint answers"; else bad "the endpoint answers"; fi
inside timeout 300 systemctl restart anvild
sleep 5
check "systemctl restart adopts it too" test -n "$serving" -a "$(engines)" = "$serving"
if wait_for 60 endpoint_answers; then ok "the endpoint answers after systemctl restart"; else bad "the endpoint answers after systemctl restart"; fi

# --- the unit's exposure ------------------------------------------------------------------------
exposure=$(inside systemd-analyze security anvild --no-pager 2>/dev/null | sed -n 's/.*Overall exposure level for anvild.service: \([0-9.]*\).*/\1/p')
check "systemd-analyze security rates the installed unit ${exposure:-?} (at most $max_exposure)" \
  awk -v e="${exposure:-99}" -v m="$max_exposure" 'BEGIN { exit !(e <= m) }'

# --- rootless podman under the unit's sandbox -----------------------------------------------------
# The container engines' path: the installed unit's every directive, its ExecStart replaced by a
# rootless podman run of a one-file image (busybox), as the anvil user.
if [ -x /bin/busybox ]; then
  rm -rf "$work/probe" && mkdir -p "$work/probe/bin" && cp /bin/busybox "$work/probe/bin/"
  tar -C "$work/probe" -cf "$work/probe.tar" . && pm cp "$work/probe.tar" "$name:/var/lib/anvil/probe.tar"
  inside chown anvil:anvil /var/lib/anvil/probe.tar
  podman_run="/usr/bin/podman --cgroup-manager=cgroupfs"
  inside sh -c "sed -e 's/^Type=notify/Type=oneshot/' -e '/^NotifyAccess=/d' -e '/^WatchdogSec=/d' -e '/^ExecReload=/d' \
      -e '/^Restart=/d' -e '/^RestartSec=/d' \
      -e 's#^ExecStart=.*#ExecStartPre=$podman_run import /var/lib/anvil/probe.tar localhost/anvil-probe\nExecStart=$podman_run run --rm --network=host localhost/anvil-probe /bin/busybox echo anvil-podman-probe-ok#' \
      /usr/local/lib/systemd/system/anvild.service >/etc/systemd/system/anvil-podman-probe.service && systemctl daemon-reload"
  inside timeout 180 systemctl start anvil-podman-probe >/dev/null 2>&1
  probe_said() { inside journalctl -u anvil-podman-probe -o cat --no-pager | grep -F anvil-podman-probe-ok >/dev/null; }
  if wait_for 10 probe_said; then
    ok "rootless podman runs a container under every directive of the unit"
  else
    bad "rootless podman runs a container under every directive of the unit"
    inside journalctl -u anvil-podman-probe -o cat --no-pager | grep -iE "error|denied" | tail -5 | sed 's/^/        /'
  fi
else
  echo "  (no /bin/busybox on this host: the rootless podman check needs busybox-static)"
fi

if [ "$failed" -gt 0 ]; then
  echo "   anvild's journal (last 40 lines):"
  inside journalctl -u anvild -o short-monotonic --no-pager | tail -40 | sed 's/^/     /'
fi
echo "systemd: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
