#!/usr/bin/env bash
# Install the test dependencies and run the tests, in tiers:
#   scripts/test.sh            everything: ruff, ansible-lint, unit tests, every role's
#                              Molecule scenario, the integration tests on a 3-node local
#                              cluster (podman; builds the node image once), then the fault
#                              suite (tests/faults) on the same cluster
#   scripts/test.sh --quick    ruff, ansible-lint and the unit tests only (no podman), to iterate
#   scripts/test.sh [--quick] PYTEST_ARGS...
#                              the linters, then one pytest run with those arguments
#                              (e.g. tests/molecule -k sysctl_tuning)
# Every run ends with the duration of each phase (and of each Molecule step and
# integration command, when those ran) and, after the fault suite, the spread of each
# figure over its healthy runs in a row.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi

phases=()
timings="$(mktemp "${TMPDIR:-/tmp}/ncclprep-timings.XXXXXX")"
export NCCLPREP_TIMINGS="$timings"
# the fault suite's healthy runs write the spread of every figure here (printed at the end)
export NCCLPREP_SPREAD="$timings.spread.json"
run_start=$SECONDS
summary() {
  local rc=$?
  trap - EXIT
  echo
  echo "== durations"
  if [ -s "$timings" ]; then
    # per Molecule step and integration command, then per phase
    awk -F'\t' '{ printf "  %-12s %-58s %7.1f s\n", $1, $2, $3 }' "$timings"
    awk -F'\t' '$1 == "molecule" { split($2, a, " "); s[a[1]] += $3 }
                END { for (r in s) printf "  %-12s %-58s %7.1f s\n", "molecule", r " (scenario, all steps)", s[r] }' \
      "$timings" | sort -k2
    echo "  ----"
  fi
  if [ -s "$NCCLPREP_SPREAD" ]; then
    echo "== spread over the healthy runs in a row (min / median / max)"
    python3 -c 'import json, sys
for k, v in json.load(open(sys.argv[1]))["spread"].items():
    print("  {:<50}".format(k), "{min:>10.4g} {median:>10.4g} {max:>10.4g}".format(**v))' "$NCCLPREP_SPREAD" || true
    rm -f "$NCCLPREP_SPREAD"
  fi
  local p
  for p in "${phases[@]}"; do printf '  %-71s %5d s\n' "${p% *}" "${p##* }"; done
  printf '  %-71s %5d s  (%d min %02d s)\n' "total" $((SECONDS - run_start)) \
    $(((SECONDS - run_start) / 60)) $(((SECONDS - run_start) % 60))
  if [ "$rc" -eq 0 ]; then echo "== all passed"; else echo "== FAILED (exit $rc): ${failed[*]:-}"; fi
  rm -f "$timings" "$timings.images.log"
  exit "$rc"
}
trap summary EXIT

# phase NAME COMMAND...: run one phase and remember how long it took (also when it fails)
failed=()
phase() {
  local name="$1" start=$SECONDS rc=0
  shift
  echo "== $name"
  "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then failed+=("$name"); name="$name [FAILED]"; fi
  phases+=("$name $((SECONDS - start))")
  return "$rc"
}

phase bootstrap scripts/bootstrap.sh --test
. scripts/env.sh
phase ruff ruff check module_utils library filter_plugins src tests scripts bench
phase "ansible-lint (profile production)" ansible-lint
if [ $# -gt 0 ]; then
  phase "pytest $*" python -m pytest --durations=15 "$@"
  exit 0
fi
# The node images (the plain one, then Slurm's) build while the unit tests run: on a fresh machine
# they took about 150 s of the Molecule and integration phases, half of it waiting on the mirror and
# the disk. Nothing else uses podman meanwhile; Molecule and the cluster find them built.
if [ "$quick" -eq 0 ]; then
  images_log="$timings.images.log"
  (scripts/local_cluster.sh image && scripts/local_cluster.sh image --slurm) > "$images_log" 2>&1 &
  images_pid=$!
fi
images() {
  wait "$images_pid" && return 0
  echo "the node images failed to build:" >&2
  tail -40 "$images_log" >&2
  return 1
}
# The pytest tiers by marker (pyproject.toml): a failing one does not stop the next.
# two pytest-xdist workers: the unit tests are CPU-bound and independent (101.7 s against 162 s)
phase "unit tests (two at a time)" python -m pytest -m "not molecule and not integration" -n 2 --durations=10 || true
if [ "$quick" -eq 0 ]; then
  phase "node images (built beside the unit tests; the wait for them)" images || true
  # two scenarios at a time, each pytest-xdist worker on nodes of its own, longest first and handed
  # out one at a time so the two lanes end together (tests/molecule/test_roles.py)
  phase "molecule (every role's scenario, two at a time)" python -m pytest -m molecule -n 2 --maxschedchunk 1 --durations=0 || true
  # one session, one cluster: tests/integration provisions it, tests/faults (the fault suite) follows
  phase "integration and faults (3-node local cluster)" python -m pytest -m integration --durations=0 \
    tests/integration tests/faults || true
fi
[ ${#failed[@]} -eq 0 ]
