#!/usr/bin/env bash
# Stop what slurm-up.sh started (by PID), and nothing it found already running.
[ -e /run/thetalker-slurm-started ] || exit 0
for f in /run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid; do
    [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
done
rm -f /run/thetalker-slurm-started
exit 0
