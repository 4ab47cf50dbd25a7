#!/usr/bin/env bash
# Install what ncclprep needs on this machine (idempotent):
#   apt: podman, runc, debootstrap (the local cluster), python3-venv, openssh-client;
#        with --test also chromium-headless-shell (the HTML report's screenshot test)
#   pip: a venv in .venv with ncclprep and its dependencies (ansible, ansible-runner, ...)
# Usage: scripts/bootstrap.sh [--test]   (--test adds pytest, molecule, linters, torch)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
extra=""
[ "${1:-}" = "--test" ] && extra="[test]"

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
need=()
for pkg in podman runc debootstrap openssh-client ca-certificates; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
browser=()
if [ -n "$extra" ] && ! command -v chromium-headless-shell >/dev/null && ! command -v chromium >/dev/null; then
  browser=(chromium-headless-shell)
fi
# debootstrap of the node image reads the mirror from apt's lists: make sure they exist.
if [ ${#need[@]} -gt 0 ] || [ ${#browser[@]} -gt 0 ] || [ -z "$(apt-get indextargets 2>/dev/null | head -n1)" ]; then
  echo "ncclprep: apt-get install ${need[*]:-(refreshing package lists)}"
  $sudo apt-get update -qq
fi
if [ ${#need[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ ${#browser[@]} -gt 0 ]; then  # the browser alone, without the desktop it recommends
  echo "ncclprep: apt-get install --no-install-recommends ${browser[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${browser[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "ncclprep: creating .venv"
  python3 -m venv .venv
fi
stamp=".venv/.ncclprep-installed${extra}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "ncclprep: pip install -e .${extra}"
  .venv/bin/pip install --quiet --disable-pip-version-check -e ".${extra}"
  touch "$stamp"
fi
