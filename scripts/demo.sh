#!/usr/bin/env bash
# The main job on the local cluster, from nothing: install what is missing, build the node image
# (first time only), start N nodes (default 3), provision them with site.yml, run the validate.yml
# preflight. Each step is the ncclprep CLI's progress line (stage, task, hosts, elapsed); Ansible's
# whole output goes to the log file named at the start (NCCLPREP_LOG). Ends with the preflight's
# verdict and where its report is; exits with validate's code (0 PASS, 1 a check failed).
# Usage: scripts/demo.sh [N]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
nodes="${1:-3}"
scripts/bootstrap.sh
. scripts/env.sh
mkdir -p reports
export NCCLPREP_LOG="$repo/reports/demo-$(date +%Y%m%dT%H%M%S).log"
echo "== ncclprep: Ansible's full output: $NCCLPREP_LOG"
echo "== ncclprep: the local cluster ($nodes nodes; the first run builds the node image, about 2 minutes)"
ncclprep cluster up --nodes "$nodes"
echo "== ncclprep: site.yml (provision)"
ncclprep provision -i inventory/local
echo "== ncclprep: validate.yml (preflight)"
rc=0
ncclprep validate -i inventory/local || rc=$?
echo "== ncclprep: Ansible's full output: $NCCLPREP_LOG"
exit "$rc"
