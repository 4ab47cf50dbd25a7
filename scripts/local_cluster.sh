#!/usr/bin/env bash
# Bring the local podman cluster up or down.
#   scripts/local_cluster.sh up [N] [--slurm]   # N nodes (default 3), fresh every time; --slurm:
#                                               # slurmctld on node1, slurmd on every node
#   scripts/local_cluster.sh grow N             # keep the running nodes, start the missing ones up
#                                               # to N (into Slurm too, when it runs Slurm)
#   scripts/local_cluster.sh reboot NODE...     # stop and start the nodes as a reboot does; waits
#                                               # until systemd has booted them and sshd answers
#   scripts/local_cluster.sh down               # remove nodes and network; safe to repeat
#   scripts/local_cluster.sh image [--slurm]    # build the node image (with Slurm) when its inputs
#                                               # changed, and nothing else
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
# shellcheck source=scripts/env.sh
. scripts/env.sh
usage() { echo "usage: $0 up [N] [--slurm] | grow N | reboot NODE... | down | image [--slurm]" >&2; exit 2; }
action="${1:-}"
[ $# -gt 0 ] && shift
if [ "$action" = reboot ]; then
  [ $# -gt 0 ] || usage
  for n in "$@"; do case "$n" in *[!A-Za-z0-9-]*|"") usage ;; esac; done
  names="$(printf '"%s",' "$@")"
  exec ansible-playbook playbooks/local_cluster.yml -e local_cluster_state=reboot \
    -e "{\"local_cluster_reboot\": [${names%,}]}"
fi
nodes="" slurm=false
for arg in "$@"; do
  case "$arg" in
    --slurm) slurm=true ;;
    *[!0-9]*|"") usage ;;
    *) nodes="$arg" ;;
  esac
done
case "$action" in
  up)   ansible-playbook playbooks/local_cluster.yml -e local_cluster_state=present \
          -e "local_cluster_nodes=${nodes:-3}" -e "local_cluster_slurm=$slurm" ;;
  grow) [ -n "$nodes" ] && [ "$slurm" = false ] || usage
        ansible-playbook playbooks/local_cluster.yml -e local_cluster_state=grow -e "local_cluster_nodes=$nodes" ;;
  image) [ -z "$nodes" ] || usage
        ansible-playbook playbooks/local_cluster.yml -e local_cluster_state=image -e "local_cluster_slurm=$slurm" ;;
  down) [ -z "$nodes" ] && [ "$slurm" = false ] || usage
        if [ -f .cluster/containers.conf ] || command -v podman >/dev/null; then
          ansible-playbook playbooks/local_cluster.yml -e local_cluster_state=absent
        fi ;;
  *) usage ;;
esac
