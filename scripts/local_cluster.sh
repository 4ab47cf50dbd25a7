#!/usr/bin/env bash
# Bring the local podman cluster up or down.
#   scripts/local_cluster.sh up [N]     # N nodes (default 3), fresh every time
#   scripts/local_cluster.sh grow N     # keep the running nodes, start the missing ones up to N
#   scripts/local_cluster.sh down       # remove nodes and network; safe to repeat
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
# shellcheck source=scripts/env.sh
. scripts/env.sh
case "${1:-}" in
  up)   ansible-playbook playbooks/local_cluster.yml -e local_cluster_state=present \
          -e "local_cluster_nodes=${2:-3}" ;;
  grow) ansible-playbook playbooks/local_cluster.yml -e local_cluster_state=grow \
          -e "local_cluster_nodes=${2:?usage: $0 grow N}" ;;
  down) if [ -f .cluster/containers.conf ] || command -v podman >/dev/null; then
          ansible-playbook playbooks/local_cluster.yml -e local_cluster_state=absent
        fi ;;
  *) echo "usage: $0 up [N] | grow N | down" >&2; exit 2 ;;
esac
