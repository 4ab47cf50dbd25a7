#!/usr/bin/env bash
# The main job on the local cluster, from nothing: install what is missing,
# build the node image (first time only), start N nodes (default 3), provision
# them with site.yml, run the validate.yml preflight, print where the report is.
# Usage: scripts/demo.sh [N]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
nodes="${1:-3}"
scripts/bootstrap.sh
. scripts/env.sh
echo "== ncclprep: starting the local cluster ($nodes nodes)"
scripts/local_cluster.sh up "$nodes"
echo "== ncclprep: site.yml (provision)"
ansible-playbook site.yml -i inventory/local
echo "== ncclprep: validate.yml (preflight)"
rc=0
ansible-playbook validate.yml -i inventory/local || rc=$?
report="$(readlink -f reports/latest || true)"
echo "== ncclprep: report: $report/summary.md (cluster.json, hosts/<host>.json beside it)"
exit "$rc"
