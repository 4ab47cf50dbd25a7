#!/bin/sh
# Try sysctl values the way the kernel takes them, without changing the node.
#
# Usage: sysctl_trial.sh PATH VALUE [PATH VALUE ...]   (each PATH under /proc/sys/net/)
# Prints one tab-separated line per fact:
#   live PATH VALUE            the value in this network namespace (tabs as spaces)
#   trial PATH ok READBACK     written in a throw-away network namespace, read back as READBACK
#   trial PATH refused         the kernel refused the write there (EINVAL: out of range, not a number)
#   trial PATH readonly|absent not per network namespace (host-global: the kernel shows it
#                              read-only or not at all there), so it cannot be tried
#   trial-unavailable REASON   no throw-away namespace could be made (no unshare, no CAP_SYS_ADMIN)
# Only net.* keys are given: they are the kernel's per-network-namespace tables, so a write in
# a new namespace dies with it. Other keys (vm.*, kernel.*) are global and never written here.
set -u
for p in "$@"; do
  case "$p" in
    /proc/sys/net/*..*) echo "sysctl_trial.sh: refusing path $p" >&2; exit 2 ;;
  esac
done
if [ "${1:-}" = --in-new-netns ]; then
  shift
  while [ $# -ge 2 ]; do
    if [ ! -e "$1" ]; then printf 'trial\t%s\tabsent\n' "$1"
    elif [ ! -w "$1" ]; then printf 'trial\t%s\treadonly\n' "$1"
    elif printf '%s\n' "$2" 2>/dev/null > "$1"; then printf 'trial\t%s\tok\t%s\n' "$1" "$(tr '\t' ' ' < "$1")"
    else printf 'trial\t%s\trefused\n' "$1"
    fi
    shift 2
  done
  exit 0
fi
if [ $(($# % 2)) -ne 0 ]; then echo "usage: $0 PATH VALUE [PATH VALUE ...]" >&2; exit 2; fi
n=1
for p in "$@"; do
  case "$p" in
    /proc/sys/net/*) ;;
    *) if [ $((n % 2)) -eq 1 ]; then echo "sysctl_trial.sh: not under /proc/sys/net/: $p" >&2; exit 2; fi ;;
  esac
  if [ $((n % 2)) -eq 1 ] && [ -r "$p" ]; then printf 'live\t%s\t%s\n' "$p" "$(tr '\t' ' ' < "$p")"; fi
  n=$((n + 1))
done
if ! command -v unshare > /dev/null 2>&1; then printf 'trial-unavailable\tno unshare command\n'; exit 0; fi
if out=$(unshare --net -- sh "$0" --in-new-netns "$@" 2>&1); then
  printf '%s\n' "$out"
else
  printf 'trial-unavailable\t%s\n' "$(printf '%s' "$out" | head -n 1)"
fi
