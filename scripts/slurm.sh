#!/usr/bin/env bash
# A SLURM cluster on this host, with accounting (sacct): Debian's slurm-wlm, slurmdbd, munge
# and MariaDB, configured for this machine's cores and memory. Needs root.
#
# By default one node: this host itself, cluster `autotune`, /etc/slurm/slurm.conf.
# With --nodes N (N >= 2): cluster `autotuneNn` of N nodes atNn1..atNnN, each in its own
# network namespace (same name) with its own hostname, address 10.77.N.(10+i) on a veth pair
# to the bridge atbrN (10.77.N.1 on the host, where this cluster's slurmctld listens, port
# 6810+10N) and its own slurmd. Its config is /etc/slurm/autotuneNn/slurm.conf: point
# SLURM_CONF there to use it. Both kinds share munge, MariaDB and slurmdbd, and can run at once.
# Idempotent: daemons already running are left alone (a node whose slurmd died is started
# again). Ends when `sinfo` shows every node up.
#
#   sudo ./scripts/slurm.sh             # then: sinfo; sbatch --wrap hostname; sacct
#   sudo ./scripts/slurm.sh --nodes 2   # then: SLURM_CONF=/etc/slurm/autotune2n/slurm.conf sinfo
set -euo pipefail

NODES=1
case "${1:-}" in
  "") ;;
  --nodes) NODES=${2:-} ;;
  *) echo "usage: slurm.sh [--nodes N]" >&2; exit 2 ;;
esac
if ! [[ "$NODES" =~ ^[1-9][0-9]?$ ]]; then
  echo "slurm.sh: --nodes takes a node count from 1 to 99" >&2
  exit 2
fi

ACCOUNT=autotune
HOST=$(hostname)

log() { echo "slurm.sh: $*" >&2; }

if [ "$(id -u)" != 0 ]; then
  log "needs root (it installs Debian packages and starts daemons)"
  exit 2
fi

packages=(slurm-wlm slurmdbd munge mariadb-server iproute2 util-linux)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi

running() { pgrep -x "$1" >/dev/null; }
# A daemon of this cluster: the process its pid file names is alive and is that program.
alive() { [ -s "$1" ] && [ "$(cat "/proc/$(cat "$1")/comm" 2>/dev/null)" = "$2" ]; }

# munge: the credential daemon every SLURM daemon and command talks to.
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
[ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create >/dev/null
running munged || runuser -u munge -- /usr/sbin/munged

# MariaDB holds the accounting database of slurmdbd.
if ! running mariadbd; then
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
  (mysqld_safe --user=mysql >/dev/null 2>&1 &)
  for _ in $(seq 60); do mysqladmin ping >/dev/null 2>&1 && break; sleep 1; done
fi
mysql -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
          GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"

mkdir -p /etc/slurm /var/log/slurm
cat > /etc/slurm/slurmdbd.conf <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
EOF
chmod 600 /etc/slurm/slurmdbd.conf

# This host as slurmd sees it (cores, sockets, memory), less some memory for the host,
# shared out among the nodes.
hardware=$(slurmd -C | head -1 | sed 's/^NodeName=[^ ]* //')
memory=$(echo "$hardware" | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
hardware=$(echo "$hardware" | sed "s/RealMemory=[0-9]*/RealMemory=$((memory * 9 / 10 / NODES))/")

# What both kinds of cluster share; $1 names this cluster's files.
common_conf() {
  cat <<EOF
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageEnforce=associations
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
KillWait=5
MinJobAge=600
InactiveLimit=0
EOF
}

# The cluster and root's association with the account, in slurmdbd.
register() {
  # slurmdbd reads slurmdbd.conf beside SLURM_CONF: the shared one, in /etc/slurm.
  running slurmdbd || env -u SLURM_CONF slurmdbd
  for _ in $(seq 60); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 1; done
  sacctmgr -n list cluster format=cluster | grep -qw "$CLUSTER" ||
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
  sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" >/dev/null 2>&1 || true
  sacctmgr -i add user root account="$ACCOUNT" defaultaccount="$ACCOUNT" \
    cluster="$CLUSTER" >/dev/null 2>&1 || true
}

# Wait until sinfo shows every node of the cluster up.
wait_up() {
  for _ in $(seq 90); do
    states=$(sinfo -h -N -o %T 2>/dev/null | sort -u | tr '\n' ' ')
    if [ -n "$states" ] && ! echo "$states" | grep -qvE '^((idle|mixed|allocated) )+$'; then
      log "cluster $CLUSTER: $NODES node(s) up ($states)"
      exit 0
    fi
    sleep 1
  done
  log "SLURM did not come up; see /var/log/slurm/"
  exit 1
}

if [ "$NODES" = 1 ]; then
  CLUSTER=autotune
  mkdir -p /var/spool/slurmctld /var/spool/slurmd
  {
    echo "ClusterName=$CLUSTER"
    echo "SlurmctldHost=$HOST"
    common_conf
    cat <<EOF
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$HOST $hardware State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
  } > /etc/slurm/slurm.conf
  register
  alive /run/slurmctld.pid slurmctld || slurmctld
  alive /run/slurmd.pid slurmd || slurmd
  wait_up
fi

# Several nodes, each a network namespace on the bridge.
CLUSTER=autotune${NODES}n
export SLURM_CONF=/etc/slurm/$CLUSTER/slurm.conf
NET=10.77.$NODES
BRIDGE=atbr$NODES
PORT=$((6810 + 10 * NODES))
node_name() { echo "at${NODES}n$1"; }

ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
ip addr replace "$NET.1/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
hosts="127.0.0.1 localhost"$'\n'"$NET.1 $HOST"
for i in $(seq "$NODES"); do hosts+=$'\n'"$NET.$((10 + i)) $(node_name "$i")"; done
for i in $(seq "$NODES"); do
  name=$(node_name "$i")
  ip netns list | grep -qw "$name" || ip netns add "$name"
  if ! ip link show "${name}h" >/dev/null 2>&1; then
    ip link add "${name}h" type veth peer name eth0 netns "$name"
    ip link set "${name}h" master "$BRIDGE"
  fi
  ip link set "${name}h" up
  ip -n "$name" addr replace "$NET.$((10 + i))/24" dev eth0
  ip -n "$name" link set eth0 up
  ip -n "$name" link set lo up
  # Mounted over /etc/hosts for the node's slurmd (as `ip netns exec` would): every node's name.
  mkdir -p "/etc/netns/$name"
  echo "$hosts" > "/etc/netns/$name/hosts"
done

mkdir -p "/etc/slurm/$CLUSTER" "/var/spool/slurmctld-$CLUSTER"
{
  echo "ClusterName=$CLUSTER"
  echo "SlurmctldHost=$HOST($NET.1)"
  echo "SlurmctldPort=$PORT"
  common_conf
  cat <<EOF
SlurmdTimeout=10
StateSaveLocation=/var/spool/slurmctld-$CLUSTER
SlurmdSpoolDir=/var/spool/slurmd-$CLUSTER/%n
SlurmctldPidFile=/run/slurmctld-$CLUSTER.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld-$CLUSTER.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
EOF
  for i in $(seq "$NODES"); do
    echo "NodeName=$(node_name "$i") NodeAddr=$NET.$((10 + i)) $hardware State=UNKNOWN"
  done
  echo "PartitionName=nodes Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
} > "$SLURM_CONF"
register
alive "/run/slurmctld-$CLUSTER.pid" slurmctld || slurmctld -f "$SLURM_CONF"
for i in $(seq "$NODES"); do
  name=$(node_name "$i")
  mkdir -p "/var/spool/slurmd-$CLUSTER/$name"
  # Its network, its hostname and its /etc/hosts; the host's other mounts (cgroups) kept.
  alive "/run/slurmd-$name.pid" slurmd ||
    nsenter --net="/run/netns/$name" unshare --uts --mount --propagation slave sh -c \
      "mount --bind /etc/netns/$name/hosts /etc/hosts && hostname $name &&
       exec slurmd -f $SLURM_CONF"
done
wait_up
