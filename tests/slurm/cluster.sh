#!/usr/bin/env bash
# A real one-node Slurm cluster for tests, from Debian's packages, run as root in a directory of its
# own: munged, slurmctld, slurmd (GPUs declared as GRES of a type, "standin", by count: no device
# files) and slurmrestd with JWT authentication, each on a free loopback port, so it never touches
# /etc or a system one.
#
#   cluster.sh start DIR [GPUS]   starts it; DIR/env holds SLURM_CONF, the REST address, a token
#   cluster.sh stop DIR           stops every daemon it started
#   cluster.sh rest-stop DIR      stops slurmrestd alone (the cluster runs on: its jobs too)
#   cluster.sh rest-start DIR     starts it again on the same address
#   cluster.sh node-fail DIR      marks the node DOWN (its jobs end NODE_FAIL), then has it back
#
# Exit code 77 (the tests' "skipped") with the reason on stderr where Slurm cannot start here: not
# root, or the packages missing (scripts/install-deps.sh installs them).
set -euo pipefail

command=${1:?usage: cluster.sh start|stop DIR [GPUS]}
dir=${2:?usage: cluster.sh start|stop DIR [GPUS]}
gpus=${3:-4}
# Whom jobs run as: slurmrestd refuses tokens for root and SlurmUser, as a site's would.
user=${ANVIL_SLURM_USER:-nobody}

skip() {
    echo "slurm cluster: $*" >&2
    exit 77
}

stop_pidfile() {
    local file=$1
    [[ -s $file ]] || return 0
    local pid
    pid=$(cat "$file")
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# slurmrestd refuses root; it drops to nobody after binding, and passes each client's JWT on to
# slurmctld (SLURM_JWT=daemon), so requests run as the token's user. Only the Slurm API: the
# accounting one (dbv0.0.38) needs slurmdbd, which this cluster has no use for.
start_rest() {
    local port
    port=$(cat "$dir/rest_port")
    SLURM_CONF=$dir/slurm.conf SLURM_JWT=daemon SLURMRESTD_AUTH_TYPES=rest_auth/jwt nohup slurmrestd -u nobody -g nogroup \
        -s openapi/v0.0.38 "127.0.0.1:$port" >>"$dir/slurmrestd.log" 2>&1 &
    echo $! >"$dir/slurmrestd.pid"
}

# Waits until slurmrestd answers a ping with the token; false if it never does.
rest_answers() {
    local port
    port=$(cat "$dir/rest_port")
    for _ in $(seq 100); do
        python3 - "http://127.0.0.1:$port/slurm/v0.0.38/ping" "$user" "$(cat "$dir/token")" 2>/dev/null <<'PY' && return 0
import sys, urllib.request
request = urllib.request.Request(sys.argv[1], headers={"X-SLURM-USER-NAME": sys.argv[2], "X-SLURM-USER-TOKEN": sys.argv[3]})
urllib.request.urlopen(request, timeout=2).read()
PY
        sleep 0.1
    done
    return 1
}

case $command in
stop)
    for daemon in slurmrestd slurmd slurmctld munged; do stop_pidfile "$dir/$daemon.pid"; done
    exit 0
    ;;
rest-stop)
    stop_pidfile "$dir/slurmrestd.pid"
    exit 0
    ;;
rest-start)
    start_rest
    rest_answers || { echo "slurmrestd did not answer: $(tail -3 "$dir/slurmrestd.log")" >&2; exit 1; }
    exit 0
    ;;
node-fail)
    # What a node failure does to its jobs: slurmctld ends them NODE_FAIL and kills what they ran.
    # Its slurmd still answers, so the node returns (ReturnToService=2); resumed if it has not.
    export SLURM_CONF=$dir/slurm.conf
    node=$(sed -n 's/^ANVIL_SLURM_NODE=//p' "$dir/env")
    scontrol update nodename="$node" state=down reason="anvil test: node failure"
    for _ in $(seq 100); do
        state=$(scontrol show node "$node" -o | sed -n 's/.*State=\([A-Z+]*\).*/\1/p')
        [[ $state == IDLE* || $state == MIXED* || $state == ALLOCATED* ]] && exit 0
        sleep 0.2
        [[ $state == DOWN* ]] && scontrol update nodename="$node" state=resume 2>/dev/null || true
    done
    echo "the node did not come back after its failure (state ${state:-unknown})" >&2
    exit 1
    ;;
start) ;;
*)
    echo "cluster.sh: unknown command $command" >&2
    exit 2
    ;;
esac

[[ $(id -u) == 0 ]] || skip "needs root (slurmd runs jobs as their users)"
for tool in munged mungekey slurmctld slurmd slurmrestd sbatch scontrol; do
    command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/install-deps.sh installs Slurm)"
done
[[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so || -n $(find /usr/lib -name auth_jwt.so 2>/dev/null | head -1) ]] ||
    skip "Slurm's JWT plugin is not installed (package slurm-wlm-jwt-plugin)"

# A fresh cluster every time: what an earlier run left (daemons, keys, state) is stopped and removed.
if [[ -d $dir ]]; then
    for daemon in slurmrestd slurmd slurmctld munged; do stop_pidfile "$dir/$daemon.pid"; done
    rm -rf "$dir"
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# munged refuses a socket directory others can write to, and a key anyone else can read.
install -d -m 0700 "$dir/munge" "$dir/ctld" "$dir/spool" "$dir/jobs"
chmod 0755 "$dir"
mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null
munged --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" --pid-file="$dir/munged.pid" \
    --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed" --force ||
    skip "munged did not start: $(tail -3 "$dir/munge/munged.log" 2>/dev/null)"

# A free loopback port: bound and released by the kernel's choice, so two clusters never collide.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
ctld_port=$(free_port)
slurmd_port=$(free_port)
rest_port=$(free_port)
node=$(hostname -s)
cpus=$(nproc)
memory_mb=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 3 / 4))

dd if=/dev/urandom of="$dir/ctld/jwt.key" bs=32 count=1 status=none
chmod 0600 "$dir/ctld/jwt.key"

cat >"$dir/slurm.conf" <<EOF
ClusterName=anvil-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$dir/ctld/jwt.key
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SchedulerParameters=sched_interval=1
KillWait=5
MinJobAge=60
# Without it a job takes the whole node's memory, and a candidate cannot run beside the default.
DefMemPerCPU=1024
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory_mb Gres=gpu:standin:$gpus State=UNKNOWN
PartitionName=gpu Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
# slurmd drops GPUs declared without device files; with task/none nothing opens them, so plain
# files stand in for /dev/nvidiaN.
mkdir -p "$dir/dev"
for ((i = 0; i < gpus; ++i)); do : >"$dir/dev/gpu$i"; done
cat >"$dir/gres.conf" <<EOF
NodeName=$node Name=gpu Type=standin File=$dir/dev/gpu[0-$((gpus - 1))]
EOF
export SLURM_CONF=$dir/slurm.conf

slurmctld -i || skip "slurmctld did not start: $(tail -3 "$dir/slurmctld.log" 2>/dev/null)"
slurmd || skip "slurmd did not start: $(tail -3 "$dir/slurmd.log" 2>/dev/null)"
for _ in $(seq 100); do
    state=$(scontrol show node "$node" -o 2>/dev/null | sed -n 's/.*State=\([A-Z+]*\).*/\1/p')
    [[ $state == IDLE* ]] && break
    sleep 0.2
done
[[ ${state:-} == IDLE* ]] || skip "the node did not become idle (state ${state:-unknown}): $(tail -3 "$dir/slurmd.log")"

echo "$rest_port" >"$dir/rest_port"
start_rest
token=$(scontrol token username="$user" lifespan=86400 | sed -n 's/^SLURM_JWT=//p')
[[ -n $token ]] || skip "scontrol token gave no token"
(
    umask 077
    printf '%s' "$token" >"$dir/token"
)
rest_answers || skip "slurmrestd did not answer: $(tail -3 "$dir/slurmrestd.log")"
cat >"$dir/env" <<EOF
SLURM_CONF=$dir/slurm.conf
ANVIL_SLURM_REST=http://127.0.0.1:$rest_port
ANVIL_SLURM_TOKEN_FILE=$dir/token
ANVIL_SLURM_USER=$user
ANVIL_SLURM_NODE=$node
ANVIL_SLURM_GPUS=$gpus
ANVIL_SLURM_CLUSTER_SCRIPT=$(cd "$(dirname "$0")" && pwd)/cluster.sh
ANVIL_SLURM_CLUSTER_DIR=$dir
EOF
echo "slurm cluster up in $dir: node $node with $gpus GPUs, slurmrestd at 127.0.0.1:$rest_port"
