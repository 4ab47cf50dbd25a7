#!/bin/sh
# PID 1 of an ncclprep local-cluster node: fresh SSH host keys per container,
# then sshd in the foreground. Kept in the image by playbooks/local_cluster.yml.
set -e
[ -s /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -A >/dev/null
mkdir -p /run/sshd
exec /usr/sbin/sshd -D -e
