#!/usr/bin/env bash
# Start a real single-node Slurm cluster on this machine (root, no systemd), for the
# test that runs the workflow through `--profile profiles/slurm`. Recipe: docs/cluster.md.
set -euo pipefail
# Already running (a developer's session): leave it alone and do not claim it.
if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    echo "slurm: already up"
    exit 0
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null
fi
mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
[ -s /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; }
chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key
[ -e /run/munge/munged.pid ] && kill -0 "$(cat /run/munge/munged.pid)" 2>/dev/null \
    || su -s /bin/sh munge -c /usr/sbin/munged
# GPU gres needs device files, even fake ones.
for i in 0 1; do [ -e /dev/fakegpu$i ] || mknod /dev/fakegpu$i c 1 3; done
mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /etc/slurm
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=sandbox
SlurmctldHost=localhost
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MinJobAge=600
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=8000 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
echo "NodeName=localhost Name=gpu File=/dev/fakegpu[0-1]" > /etc/slurm/gres.conf
/usr/sbin/slurmctld
/usr/sbin/slurmd -N localhost
for _ in $(seq 1 120); do
    if [ "$(sinfo -h -o %T 2>/dev/null)" = idle ]; then
        touch /run/thetalker-slurm-started   # slurm-down.sh stops only what we started
        echo "slurm: up"
        exit 0
    fi
    sleep 0.5
done
echo "slurm: node did not become idle" >&2
exit 1
