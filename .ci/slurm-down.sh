#!/usr/bin/env bash
# Stop what slurm-up.sh started, by PID.
for f in /run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid; do
    [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
done
exit 0
