#!/usr/bin/env bash
# A one-node SLURM cluster on this host, with accounting (sacct): Debian's slurm-wlm,
# slurmdbd, munge and MariaDB, configured for this machine's cores and memory. Needs root.
# Idempotent: daemons already running are left alone. Ends when `sinfo` shows the node idle.
#
#   sudo ./scripts/slurm.sh          # then: sinfo; sbatch --wrap hostname; sacct
set -euo pipefail

CLUSTER=autotune
ACCOUNT=autotune
HOST=$(hostname)

log() { echo "slurm.sh: $*" >&2; }

if [ "$(id -u)" != 0 ]; then
  log "needs root (it installs Debian packages and starts daemons)"
  exit 2
fi

packages=(slurm-wlm slurmdbd munge mariadb-server)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi

running() { pgrep -x "$1" >/dev/null; }

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

mkdir -p /etc/slurm /var/log/slurm /var/spool/slurmctld /var/spool/slurmd
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

# This node as slurmd sees it (cores, sockets, memory), less some memory for the host.
node=$(slurmd -C | head -1)
memory=$(echo "$node" | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
node=$(echo "$node" | sed "s/RealMemory=[0-9]*/RealMemory=$((memory * 9 / 10))/")
cat > /etc/slurm/slurm.conf <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageEnforce=associations
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
KillWait=5
MinJobAge=600
InactiveLimit=0
$node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF

running slurmdbd || slurmdbd
for _ in $(seq 60); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 1; done
sacctmgr -n list cluster format=cluster | grep -qw "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null
sacctmgr -n list account format=account | grep -qw "$ACCOUNT" || sacctmgr -i add account "$ACCOUNT" >/dev/null
sacctmgr -n list user format=user | grep -qw root || true
sacctmgr -i add user root account="$ACCOUNT" defaultaccount="$ACCOUNT" >/dev/null 2>&1 || true

running slurmctld || slurmctld
running slurmd || slurmd
for _ in $(seq 60); do
  state=$(sinfo -h -N -o %T 2>/dev/null | head -1)
  case "$state" in idle | mixed | allocated) log "node $HOST is $state"; exit 0 ;; esac
  sleep 1
done
log "SLURM did not come up; see /var/log/slurm/"
exit 1
