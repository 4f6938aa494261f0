# shellcheck shell=bash
# A real one-host Slurm cluster for the launcher tests (sourced after lib.sh).
# munged (own socket, as the munge user) + slurmctld + one slurmd per virtual
# node, all state under $WORK/slurm, ports on 127.0.0.1, stopped on exit. Nothing
# global is touched except /etc/munge/munge.key, created if missing (doc/slurm.md).
#   slurm_start NODES CPUS   -> cluster up; exports SLURM_CONF; sets SLURM_DIR
#   slurm_wait_state JOB SECS STATE_REGEX  -> polls squeue/scontrol (never sbatch --wait)
#   slurm_job_state JOB      -> prints the job's state (PENDING, RUNNING, COMPLETED, ...)
#   slurm_stop               -> stops the daemons (also run on exit)

SLURM_DIR=
SLURM_DAEMONS=()

slurm_have() { command -v sbatch >/dev/null && command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
  && command -v munged >/dev/null; }

# Consecutive free loopback ports: slurmd ports are given as one range. They are drawn
# below the kernel's ephemeral range: a port some client holds as its source port
# refuses connect() (so it looks free) yet makes slurmd's bind() fail, which left a
# node down in CI. Each port is checked by binding it, as the daemon will.
slurm_free_ports() {  # slurm_free_ports COUNT -> first port of COUNT free ones
  python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
try:
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except OSError:
    lo = 32768
top = max(lo, 12000) - n  # [10000, ephemeral start)
for _ in range(200):
    base = random.randint(10000, top)
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(base)
    sys.exit(0)
sys.exit(1)
PY
}

slurm_start() {  # slurm_start NODES CPUS
  local nodes=$1 cpus=$2 i
  SLURM_DIR="$WORK/slurm"
  mkdir -p "$SLURM_DIR/state" "$SLURM_DIR/munge"
  # munged refuses sockets in folders others cannot traverse.
  chmod 755 "$WORK" "$SLURM_DIR"
  chown munge:munge "$SLURM_DIR/munge"; chmod 755 "$SLURM_DIR/munge"
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=128 2>/dev/null
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  fi
  local sock="$SLURM_DIR/munge/munge.socket"
  runuser -u munge -- munged --socket="$sock" --pid-file="$SLURM_DIR/munge/munged.pid" \
    --log-file="$SLURM_DIR/munge/munged.log" --seed-file="$SLURM_DIR/munge/munged.seed" \
    || { echo "munged did not start:"; cat "$SLURM_DIR/munge/munged.log"; return 1; }
  SLURM_DAEMONS+=("$(cat "$SLURM_DIR/munge/munged.pid")")

  local ctl_port node_port
  # one range: the controller's port, then the nodes'
  ctl_port=$(slurm_free_ports $(( nodes + 1 ))) || { echo "no free ports"; return 1; }
  node_port=$(( ctl_port + 1 ))
  local host; host=$(hostname -s)
  cat >"$SLURM_DIR/slurm.conf" <<CONF
# one-host test cluster (tests/integration/lib_slurm.sh)
ClusterName=pailtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job may start again after this many seconds (default 120)
AuthInfo=socket=$sock,cred_expire=5
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool-%n
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd-%n.pid
SlurmctldLogFile=$SLURM_DIR/slurmctld.log
SlurmdLogFile=$SLURM_DIR/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
MinJobAge=300
KillWait=10
# heterogeneous jobs are started by the backfill scheduler only (default every 30 s)
SchedulerParameters=bf_interval=1
NodeName=n[1-$nodes] NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=4000 Port=[$node_port-$(( node_port + nodes - 1 ))] State=UNKNOWN
PartitionName=debug Nodes=n[1-$nodes] Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF="$SLURM_DIR/slurm.conf"
  slurmctld -i -f "$SLURM_CONF" || { echo "slurmctld did not start:"; tail -20 "$SLURM_DIR/slurmctld.log"; return 1; }
  # The daemons write their pid files after start-up: seconds on a loaded 2-core machine, over
  # 30 s at a load of 10 (seen in CI while other work ran), so wait up to 120 s and say which one.
  for i in $(seq 1 1200); do [ -s "$SLURM_DIR/slurmctld.pid" ] && break; sleep 0.1; done
  [ -s "$SLURM_DIR/slurmctld.pid" ] || { echo "slurmctld wrote no pid file in 120 s"; return 1; }
  SLURM_DAEMONS+=("$(cat "$SLURM_DIR/slurmctld.pid")")
  for i in $(seq 1 "$nodes"); do
    slurmd -N "n$i" -f "$SLURM_CONF" || { echo "slurmd n$i did not start:"; tail -20 "$SLURM_DIR/slurmd-n$i.log"; return 1; }
  done
  for i in $(seq 1 "$nodes"); do
    for _ in $(seq 1 1200); do [ -s "$SLURM_DIR/slurmd-n$i.pid" ] && break; sleep 0.1; done
    [ -s "$SLURM_DIR/slurmd-n$i.pid" ] ||
      { echo "slurmd n$i wrote no pid file in 120 s; its log:"; tail -20 "$SLURM_DIR/slurmd-n$i.log"; return 1; }
    SLURM_DAEMONS+=("$(cat "$SLURM_DIR/slurmd-n$i.pid")")
  done
  # Nodes register within a few seconds; idle means ready for jobs.
  for i in $(seq 1 300); do
    [ "$(sinfo -h -t idle -o '%D' 2>/dev/null | awk '{s += $1} END {print s + 0}')" = "$nodes" ] && return 0
    sleep 0.1
  done
  echo "slurm nodes did not become idle within 30 s:"; sinfo 2>&1; tail -5 "$SLURM_DIR/slurmctld.log"; return 1
}

slurm_job_state() {  # the job's (het leader's) state; scontrol keeps finished jobs MinJobAge seconds
  scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2
}

slurm_wait_state() {  # slurm_wait_state JOB SECONDS REGEX: 0 when the state matches before the deadline
  local job=$1 deadline=$(( $(date +%s) + $2 )) re=$3 st
  while [ "$(date +%s)" -lt "$deadline" ]; do
    st=$(slurm_job_state "$job")
    [[ "$st" =~ ^($re)$ ]] && return 0
    sleep 1
  done
  echo "job $job: state '$st' after $2 s (waited for $re)"; return 1
}

slurm_stop() {
  local p
  if [ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ]; then
    scancel --quiet --user=root 2>/dev/null || true
    # Let slurmd end the jobs' steps (slurmstepd lives on after slurmd).
    for _ in $(seq 1 30); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 1; done
  fi
  # slurmd first (it kills its steps), then slurmctld, then munged.
  for (( i=${#SLURM_DAEMONS[@]}-1; i>=0; i-- )); do
    p=${SLURM_DAEMONS[$i]}; [ -n "$p" ] && kill "$p" 2>/dev/null
  done
  for p in "${SLURM_DAEMONS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
  done
  SLURM_DAEMONS=()
}
