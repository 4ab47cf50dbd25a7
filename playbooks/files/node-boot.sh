#!/bin/sh
# Early boot of an ncclprep local-cluster node (ncclprep-node-boot.service, before the network, the
# sysctls and sshd). It stands in for what a real node's installer, udev and cloud-init do:
# - SSH host keys, made on the first boot as openssh-server's installation makes them on a host;
# - every network link marked initialised in udev's database: the node runs no udevd (one in a
#   privileged container would act on the host's devices) and systemd-networkd configures a link
#   only once udev has initialised it;
# - on the first boot, the interface's netplan file from the address, route and MTU podman gave it,
#   as cloud-init writes 50-cloud-init.yaml from its datasource, and the installer's /etc/hosts
#   line naming the node (127.0.1.1, Debian's and cloud-init's default). At later boots netplan's
#   generator turns the file into systemd-networkd's configuration, drop-ins included.
# Kept in the image by playbooks/local_cluster/image.yml.
set -eu
[ -s /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -A >/dev/null
mkdir -p /run/udev/data
for link in /sys/class/net/*; do
  [ -r "$link/ifindex" ] && printf 'I:1\n' > "/run/udev/data/n$(cat "$link/ifindex")"
done
plan=/etc/netplan/50-cloud-init.yaml
if [ ! -e "$plan" ] && [ -e /sys/class/net/eth0 ]; then
  address="$(ip -4 -o address show dev eth0 | awk '{print $4; exit}')"
  gateway="$(ip -4 route show default dev eth0 | awk '{print $3; exit}')"
  umask 077
  {
    echo "# Written at the first boot from what the node's network gave it (ncclprep-node-boot)."
    echo "network:"
    echo "  version: 2"
    echo "  ethernets:"
    echo "    eth0:"
    echo "      addresses: [$address]"
    [ -z "$gateway" ] || echo "      routes: [{to: default, via: $gateway}]"
    # no router advertises here: waiting for one held network-online.target 13 s at every boot
    echo "      accept-ra: false"
    echo "      mtu: $(cat /sys/class/net/eth0/mtu)"
  } > "$plan.new"
  mv "$plan.new" "$plan"
  netplan generate
fi
name="$(hostname)"
grep -qE "[[:space:]]$name([[:space:]]|\$)" /etc/hosts || printf '127.0.1.1\t%s\n' "$name" >> /etc/hosts
