#!/usr/bin/env bash
# Install the test dependencies and run every test: lint, unit tests, and the
# integration test on a 3-node local cluster (podman; builds the image once).
# Usage: scripts/test.sh [pytest args]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
scripts/bootstrap.sh --test
. scripts/env.sh
echo "== ruff"
ruff check module_utils library filter_plugins src tests
echo "== ansible-lint (profile production)"
ansible-lint
echo "== pytest"
python -m pytest "$@"
