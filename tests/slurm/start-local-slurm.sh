#!/usr/bin/env bash
# Kept in this repository so that CI's clean clone can start a real SLURM for
# tests/test_slurm.py. Usage and environment knobs are documented below.
# start-local-slurm.sh - bring up a one-node SLURM cluster (munged + slurmctld + slurmd)
# on this machine, for testing `snakemake --executor slurm` end to end.
#
# Usage (as root):
#   bash start-local-slurm.sh [start|stop|restart|status]     (default: start)
#
# Idempotent: `start` on a healthy cluster with an unchanged config does nothing but
# print the READY line; with a changed config or a dead daemon it restarts cleanly.
# Daemons are started and stopped by the PIDs in their pid files, never by name.
#
# Environment knobs (all optional):
#   SLURM_LOCAL_PARTITION=debug      name of the single (default) partition
#   SLURM_LOCAL_FAKE_GPUS=0          N>0 declares N fake "gpu" GRES (symlinks to /dev/null),
#                                    so --gpus/--gres=gpu:N jobs schedule and get
#                                    CUDA_VISIBLE_DEVICES; there is no real GPU behind them
#   SLURM_LOCAL_MEM_RESERVE_MB=1024  memory kept back from SLURM (RealMemory = detected - this)
#   SLURM_LOCAL_MIN_JOB_AGE=300      seconds slurmctld keeps finished jobs; squeue-based status
#                                    checks (no sacct here) need >= 3x the poll interval
#   SLURM_LOCAL_ACCOUNTING=0         1 = also run MariaDB + slurmdbd (apt installs mariadb-server
#                                    and slurmdbd), so sacct, sacctmgr, account checks and
#                                    the plugin's efficiency report work; account "harness"
#   SLURM_LOCAL_NO_APT=1             never run apt-get (fail if slurm is not installed)
#
# Accounting off (default): `sacct` answers "Slurm accounting storage is disabled", so with
# snakemake-executor-plugin-slurm set `slurm-status-command: squeue` (else it hangs).
set -euo pipefail

ACTION="${1:-start}"
PARTITION="${SLURM_LOCAL_PARTITION:-debug}"
FAKE_GPUS="${SLURM_LOCAL_FAKE_GPUS:-0}"
MEM_RESERVE_MB="${SLURM_LOCAL_MEM_RESERVE_MB:-1024}"
MIN_JOB_AGE="${SLURM_LOCAL_MIN_JOB_AGE:-300}"
ACCOUNTING="${SLURM_LOCAL_ACCOUNTING:-0}"
ACCOUNT=harness
DB_PASS=slurmlocal

CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
GRES_CONF="$CONF_DIR/gres.conf"
RUN_DIR=/run/slurm-local
CTLD_PID="$RUN_DIR/slurmctld.pid"
SLURMD_PID="$RUN_DIR/slurmd.pid"
MUNGE_RUN=/run/munge
MUNGE_PID="$MUNGE_RUN/munged.pid"
DBD_CONF="$CONF_DIR/slurmdbd.conf"
DBD_PID="$RUN_DIR/slurmdbd.pid"
MYSQL_RUN=/run/mysqld
MYSQL_PID="$MYSQL_RUN/mariadb.pid"
MYSQL_SOCK="$MYSQL_RUN/mysqld.sock"
STATE_DIR=/var/spool/slurmctld
SPOOL_DIR=/var/spool/slurmd
LOG_DIR=/var/log/slurm
FAKE_GPU_DIR=/var/lib/slurm-local/fakegpu
MARK="# managed by start-local-slurm.sh"

log() { echo "start-local-slurm: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"

# ---------------------------------------------------------------- pid helpers
# pid_alive PIDFILE EXPECTED_COMM -> prints pid and returns 0 if that process runs
pid_alive() {
    local f="$1" comm="$2" pid
    [ -s "$f" ] || return 1
    pid="$(tr -dc '0-9' < "$f")"
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
    # guard against a recycled pid: the command name must match
    grep -qx "$comm" "/proc/$pid/comm" 2>/dev/null || return 1
    # a killed daemon can linger as a zombie until something reaps it
    case "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" in
        Z|X|"") return 1 ;;
    esac
    echo "$pid"
}

# stop_pidfile PIDFILE COMM
stop_pidfile() {
    local f="$1" comm="$2" pid i
    if pid="$(pid_alive "$f" "$comm")"; then
        log "stopping $comm (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 1 30); do
            [ -d "/proc/$pid" ] || break
            sleep 0.5
        done
        if [ -d "/proc/$pid" ]; then
            log "$comm (pid $pid) did not stop, sending KILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.5
        fi
    fi
    rm -f "$f"
}

stop_all() {
    stop_pidfile "$SLURMD_PID" slurmd
    stop_pidfile "$CTLD_PID" slurmctld
    stop_pidfile "$DBD_PID" slurmdbd
    stop_pidfile "$MYSQL_PID" mariadbd
    stop_pidfile "$MUNGE_PID" munged
}

# ---------------------------------------------------------------- install
install_packages() {
    local missing=0 b
    for b in slurmctld slurmd munged munge sbatch squeue sinfo scontrol srun; do
        command -v "$b" >/dev/null 2>&1 || missing=1
    done
    local pkgs="slurmctld slurmd slurm-client munge"
    if [ "$ACCOUNTING" = 1 ]; then
        for b in slurmdbd mariadbd mariadb; do
            command -v "$b" >/dev/null 2>&1 || missing=1
        done
        pkgs="$pkgs slurmdbd mariadb-server"
    fi
    [ "$missing" -eq 0 ] && return 0
    [ "${SLURM_LOCAL_NO_APT:-0}" = 1 ] && die "slurm/munge not installed and SLURM_LOCAL_NO_APT=1"
    log "installing $pkgs (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
}

# ---------------------------------------------------------------- config
node_name() { hostname -s; }

render_config() {
    local node cpus boards sockets cores threads mem line
    node="$(node_name)"
    # `slurmd -C` prints the node's real hardware as a slurm.conf NodeName line
    line="$(slurmd -C 2>/dev/null | head -n1)"
    cpus="$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$line")"
    boards="$(sed -n 's/.*Boards=\([0-9]*\).*/\1/p' <<<"$line")"
    sockets="$(sed -n 's/.*SocketsPerBoard=\([0-9]*\).*/\1/p' <<<"$line")"
    cores="$(sed -n 's/.*CoresPerSocket=\([0-9]*\).*/\1/p' <<<"$line")"
    threads="$(sed -n 's/.*ThreadsPerCore=\([0-9]*\).*/\1/p' <<<"$line")"
    mem="$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$line")"
    [ -n "$cpus" ] && [ -n "$mem" ] || die "could not read hardware from 'slurmd -C': $line"
    mem=$(( mem > MEM_RESERVE_MB + 512 ? mem - MEM_RESERVE_MB : mem ))
    local gres_node="" gres_types="" acct
    if [ "$ACCOUNTING" = 1 ]; then
        acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30"
    else
        acct="# no slurmdbd: sacct is unavailable; finished jobs are kept MinJobAge seconds for squeue
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
    fi
    if [ "$FAKE_GPUS" -gt 0 ]; then
        gres_types="GresTypes=gpu"
        gres_node=" Gres=gpu:$FAKE_GPUS"
    fi
    cat <<EOF
$MARK (regenerated on every start; edit the script, not this file)
ClusterName=localcluster
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
# no cgroups: plain process tracking, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
$acct
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.log
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=$MIN_JOB_AGE
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=10
$gres_types
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus Boards=${boards:-1} SocketsPerBoard=${sockets:-1} CoresPerSocket=${cores:-$cpus} ThreadsPerCore=${threads:-1} RealMemory=$mem$gres_node State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

render_dbd() {
    [ "$ACCOUNTING" = 1 ] || return 0
    cat <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
LogFile=$LOG_DIR/slurmdbd.log
PidFile=$DBD_PID
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$DB_PASS
EOF
}

render_gres() {
    [ "$FAKE_GPUS" -gt 0 ] || return 0
    echo "$MARK"
    echo "NodeName=$(node_name) Name=gpu File=$FAKE_GPU_DIR/gpu[0-$((FAKE_GPUS - 1))]"
}

prepare_fake_gpus() {
    [ "$FAKE_GPUS" -gt 0 ] || return 0
    local i
    mkdir -p "$FAKE_GPU_DIR"
    # slurmd wants a character device per GPU; a symlink to /dev/null is one
    for i in $(seq 0 $((FAKE_GPUS - 1))); do
        ln -sfn /dev/null "$FAKE_GPU_DIR/gpu$i"
    done
}

# ---------------------------------------------------------------- health
node_state() { sinfo -h -N -n "$(node_name)" -o '%t' 2>/dev/null | head -n1; }

healthy() {
    pid_alive "$MUNGE_PID" munged >/dev/null || return 1
    pid_alive "$CTLD_PID" slurmctld >/dev/null || return 1
    pid_alive "$SLURMD_PID" slurmd >/dev/null || return 1
    if [ "$ACCOUNTING" = 1 ]; then
        pid_alive "$MYSQL_PID" mariadbd >/dev/null || return 1
        pid_alive "$DBD_PID" slurmdbd >/dev/null || return 1
        sacctmgr -n list cluster format=cluster%40 2>/dev/null | grep -qw localcluster || return 1
    fi
    scontrol ping 2>/dev/null | grep -q 'UP' || return 1
    case "$(node_state)" in
        idle*|mix*|alloc*|comp*) return 0 ;;
        *) return 1 ;;
    esac
}

ready_line() {
    local cpus mem gres
    cpus="$(sinfo -h -N -n "$(node_name)" -o '%c' | head -n1)"
    mem="$(sinfo -h -N -n "$(node_name)" -o '%m' | head -n1)"
    gres="$(sinfo -h -N -n "$(node_name)" -o '%G' | head -n1)"
    local acct="accounting=off (sacct unavailable: use slurm-status-command squeue)"
    [ "$ACCOUNTING" = 1 ] && acct="accounting=slurmdbd account=$ACCOUNT (sacct works)"
    echo "SLURM READY: cluster=localcluster node=$(node_name) partition=$PARTITION cpus=$cpus mem_mb=$mem gres=$gres state=$(node_state) $acct"
}

# ---------------------------------------------------------------- start
start_munge() {
    if pid_alive "$MUNGE_PID" munged >/dev/null; then return 0; fi
    if [ ! -s /etc/munge/munge.key ]; then
        log "creating /etc/munge/munge.key"
        if command -v mungekey >/dev/null 2>&1; then
            mungekey --create --keyfile=/etc/munge/munge.key --force
        else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
        fi
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
    mkdir -p "$MUNGE_RUN" /var/lib/munge /var/log/munge
    chown munge:munge "$MUNGE_RUN" /var/lib/munge /var/log/munge
    chmod 0755 "$MUNGE_RUN"
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged --pid-file="$MUNGE_PID"
    local i
    for i in $(seq 1 20); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    die "munged does not answer (see /var/log/munge/munged.log)"
}

start_mariadb() {
    [ "$ACCOUNTING" = 1 ] || return 0
    if ! pid_alive "$MYSQL_PID" mariadbd >/dev/null; then
        mkdir -p "$MYSQL_RUN" /var/log/mysql
        chown mysql:mysql "$MYSQL_RUN" /var/log/mysql
        log "starting mariadbd"
        setsid runuser -u mysql -- /usr/sbin/mariadbd --pid-file="$MYSQL_PID" \
            --socket="$MYSQL_SOCK" --bind-address=127.0.0.1 \
            --log-error=/var/log/mysql/error.log </dev/null >/dev/null 2>&1 &
    fi
    local i
    for i in $(seq 1 60); do
        mariadb --socket="$MYSQL_SOCK" -e 'select 1' >/dev/null 2>&1 && break
        sleep 0.5
    done
    mariadb --socket="$MYSQL_SOCK" -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;" ||
        die "mariadb does not answer (see /var/log/mysql/error.log)"
}

start_slurmdbd() {
    [ "$ACCOUNTING" = 1 ] || return 0
    mkdir -p "$RUN_DIR" "$LOG_DIR"
    if ! pid_alive "$DBD_PID" slurmdbd >/dev/null; then
        log "starting slurmdbd"
        slurmdbd
    fi
    local i
    for i in $(seq 1 40); do
        sacctmgr -n list cluster >/dev/null 2>&1 && break
        sleep 0.5
    done
    sacctmgr -n list cluster >/dev/null 2>&1 || die "slurmdbd not up (see $LOG_DIR/slurmdbd.log)"
    sacctmgr -n list cluster format=cluster%40 | grep -qw localcluster ||
        sacctmgr -i add cluster localcluster >/dev/null
    sacctmgr -n list account format=account%40 | grep -qw "$ACCOUNT" ||
        sacctmgr -i add account "$ACCOUNT" Description=local Organization=local >/dev/null
    sacctmgr -n list assoc user=root format=account%40 | grep -qw "$ACCOUNT" ||
        sacctmgr -i add user root Account="$ACCOUNT" DefaultAccount="$ACCOUNT" >/dev/null
}

start_slurm() {
    local clean="$1" i
    mkdir -p "$RUN_DIR" "$STATE_DIR" "$SPOOL_DIR" "$LOG_DIR"
    if ! pid_alive "$CTLD_PID" slurmctld >/dev/null; then
        log "starting slurmctld${clean:+ (clean state)}"
        # -c: forget saved jobs/node state (used when the config changed)
        slurmctld ${clean:+-c}
    fi
    for i in $(seq 1 40); do
        scontrol ping 2>/dev/null | grep -q UP && break
        sleep 0.5
    done
    scontrol ping 2>/dev/null | grep -q UP || die "slurmctld not up (see $LOG_DIR/slurmctld.log)"
    if ! pid_alive "$SLURMD_PID" slurmd >/dev/null; then
        log "starting slurmd"
        slurmd
    fi
    for i in $(seq 1 60); do
        case "$(node_state)" in
            idle*|mix*|alloc*) return 0 ;;
            down*|drain*|inval*)
                # e.g. left DOWN by an earlier unclean stop
                scontrol update nodename="$(node_name)" state=resume >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    die "node $(node_name) not idle (state '$(node_state)'; see $LOG_DIR/slurmd.log and slurmctld.log)"
}

do_start() {
    install_packages
    mkdir -p "$CONF_DIR"
    local tmp tmpg tmpd changed=""
    tmp="$(mktemp)"; tmpg="$(mktemp)"; tmpd="$(mktemp)"
    render_config > "$tmp"
    render_gres > "$tmpg"
    render_dbd > "$tmpd"
    if ! cmp -s "$tmp" "$CONF" 2>/dev/null; then changed=1; fi
    if [ -s "$tmpd" ]; then
        cmp -s "$tmpd" "$DBD_CONF" 2>/dev/null || changed=1
    fi
    if [ -s "$tmpg" ]; then
        cmp -s "$tmpg" "$GRES_CONF" 2>/dev/null || changed=1
    elif [ -e "$GRES_CONF" ] && grep -q "$MARK" "$GRES_CONF"; then
        changed=1
    fi

    if [ -z "$changed" ] && healthy; then
        rm -f "$tmp" "$tmpg" "$tmpd"
        log "already running, config unchanged: nothing to do"
        ready_line
        return 0
    fi

    if [ -n "$changed" ]; then
        log "writing $CONF (fake gpus: $FAKE_GPUS)"
        if [ -e "$CONF" ] && ! grep -q "$MARK" "$CONF"; then
            cp -p "$CONF" "$CONF.bak.$(date +%s)"
            log "kept the previous, foreign $CONF as $CONF.bak.*"
        fi
        install -m 0644 "$tmp" "$CONF"
        if [ -s "$tmpg" ]; then
            install -m 0644 "$tmpg" "$GRES_CONF"
        elif [ -e "$GRES_CONF" ] && grep -q "$MARK" "$GRES_CONF"; then
            rm -f "$GRES_CONF"
        fi
        if [ -s "$tmpd" ]; then
            # slurmdbd refuses a config that others can read
            install -m 0600 "$tmpd" "$DBD_CONF"
        fi
    fi
    rm -f "$tmp" "$tmpg" "$tmpd"
    prepare_fake_gpus

    # restart whatever is running of ours, so that all daemons read the same config
    stop_pidfile "$SLURMD_PID" slurmd
    stop_pidfile "$CTLD_PID" slurmctld
    if [ "$ACCOUNTING" != 1 ]; then
        stop_pidfile "$DBD_PID" slurmdbd
        stop_pidfile "$MYSQL_PID" mariadbd
    elif [ -n "$changed" ]; then
        stop_pidfile "$DBD_PID" slurmdbd
    fi
    start_munge
    start_mariadb
    start_slurmdbd
    start_slurm "$changed"
    ready_line
}

do_status() {
    local d
    for d in "munged:$MUNGE_PID" "mariadbd:$MYSQL_PID" "slurmdbd:$DBD_PID" \
             "slurmctld:$CTLD_PID" "slurmd:$SLURMD_PID"; do
        if pid="$(pid_alive "${d#*:}" "${d%%:*}")"; then
            echo "${d%%:*}: running (pid $pid)"
        else
            echo "${d%%:*}: not running"
        fi
    done
    if healthy; then ready_line; return 0; fi
    echo "SLURM NOT READY"
    return 1
}

case "$ACTION" in
    start) do_start ;;
    stop) stop_all; log "stopped" ;;
    restart) stop_all; do_start ;;
    status) do_status ;;
    *) die "usage: $0 [start|stop|restart|status]" ;;
esac
