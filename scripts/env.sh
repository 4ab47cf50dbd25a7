# Sourced by the scripts: the project's venv, its ansible.cfg and podman settings.
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ ! -x "$repo/.venv/bin/ansible-playbook" ]; then
  echo "ncclprep: $repo/.venv is not set up; run scripts/bootstrap.sh first" >&2
  return 1 2>/dev/null || exit 1
fi
export PATH="$repo/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$repo/ansible.cfg"
if [ -f "$repo/.cluster/containers.conf" ]; then export CONTAINERS_CONF="$repo/.cluster/containers.conf"; fi
