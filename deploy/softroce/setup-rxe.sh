#!/bin/bash
# Soft-RoCE on a Linux host without an RDMA NIC: loads rdma_rxe and puts an
# rxe device on an Ethernet interface, so rdma:// (kv-server, clients,
# perftest) runs over that interface. Every host that talks RDMA to another
# needs one. Needs root, iproute2's `rdma` and a kernel with CONFIG_RDMA_RXE
# (Debian's has it; where it is missing, use deploy/softroce-vm/).
#   setup-rxe.sh [--netdev IFACE] [--name NAME]   add NAME (default rxe0) on IFACE
#                                                 (default: the default route's);
#                                                 nothing to do if it is there already
#   setup-rxe.sh --remove [--name NAME]           delete it
# Exit 0: done. 1: this host cannot (one line says why). 2: bad arguments.
# The device does not survive a reboot: run this at boot (a oneshot unit).
set -euo pipefail

NAME=rxe0
NETDEV=
REMOVE=false

fail() {
  echo "setup-rxe: $*" >&2
  exit 1
}
usage() {
  echo "setup-rxe: $* (usage: setup-rxe.sh [--netdev IFACE] [--name NAME] | --remove [--name NAME])" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case $1 in
  --netdev | --name)
    if [ $# -lt 2 ] || [ -z "$2" ]; then usage "$1 needs a value"; fi
    if [ "$1" = --netdev ]; then NETDEV=$2; else NAME=$2; fi
    shift 2
    ;;
  --remove)
    REMOVE=true
    shift
    ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 0
    ;;
  *) usage "unknown argument $1" ;;
  esac
done
[ "$REMOVE" = false ] || [ -z "$NETDEV" ] || usage "--remove takes no --netdev"

command -v rdma >/dev/null || fail "the rdma command is missing: apt-get install iproute2"
[ "$(id -u)" = 0 ] || fail "needs root (loading modules and adding RDMA links need CAP_SYS_MODULE and CAP_NET_ADMIN)"

# The netdev an RDMA link sits on, or nothing: "link rxe0/1 state ACTIVE ... netdev eth0".
netdev_of() {
  rdma link show "$1/1" 2>/dev/null | sed -n 's/.* netdev \([^ ]*\).*/\1/p'
}

if [ "$REMOVE" = true ]; then
  if [ ! -e "/sys/class/infiniband/$NAME" ]; then
    echo "setup-rxe: no RDMA device $NAME: nothing to remove"
    exit 0
  fi
  rdma link delete "$NAME" || fail "could not delete $NAME (is it an rxe device?)"
  echo "setup-rxe: removed $NAME"
  exit 0
fi

if [ -z "$NETDEV" ]; then
  NETDEV=$(ip -o route show default 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p' | head -n1)
  [ -n "$NETDEV" ] || fail "no default route to take the interface from: give --netdev IFACE"
fi
[ -e "/sys/class/net/$NETDEV" ] || fail "no network interface $NETDEV (see ip link)"

# Already there (a second run, or a device made by hand)?
if [ -e "/sys/class/infiniband/$NAME" ]; then
  on=$(netdev_of "$NAME")
  [ "$on" = "$NETDEV" ] || fail "an RDMA device $NAME exists on ${on:-another device}, not on $NETDEV: choose another --name"
  echo "setup-rxe: $NAME is already on $NETDEV"
else
  # rdma_rxe: the device. rdma_ucm: /dev/infiniband/rdma_cm, which librdmacm
  # (rdma:// connection setup) opens. Already loaded, or built in, is fine:
  # the kit's guest loads them at boot and has no module tree for modprobe.
  for module in rdma_rxe rdma_ucm; do
    [ -d "/sys/module/$module" ] && continue
    modprobe "$module" 2>/dev/null ||
      fail "cannot load $module: this kernel ($(uname -r)) lacks Soft-RoCE (CONFIG_RDMA_RXE); use a distribution kernel or deploy/softroce-vm/"
  done
  for other in /sys/class/infiniband/*; do
    [ -e "$other" ] || continue
    if [ "$(netdev_of "${other##*/}")" = "$NETDEV" ]; then
      fail "$NETDEV already carries the RDMA device ${other##*/}: use that one"
    fi
  done
  # "No such file or directory" here usually means the kernel could not load
  # the crc32 crypto module rxe computes its checksums with (crc32_generic).
  rdma link add "$NAME" type rxe netdev "$NETDEV" || fail "rdma link add $NAME type rxe netdev $NETDEV failed"
  echo "setup-rxe: added $NAME on $NETDEV"
fi

# rxe's port is ACTIVE while its netdev is up and has carrier.
state=$(rdma link show "$NAME/1" | sed -n 's/.* state \([^ ]*\).*/\1/p')
[ "$state" = ACTIVE ] || fail "$NAME is $state, not ACTIVE: is $NETDEV up (ip link set $NETDEV up)?"
for dev in /dev/infiniband/rdma_cm /dev/infiniband/uverbs*; do
  [ -e "$dev" ] || fail "$dev is missing: rdma:// needs it (is udev or devtmpfs running?)"
done
echo "setup-rxe: $(rdma link show "$NAME/1")"
if [ "$(ulimit -l)" != unlimited ]; then
  echo "setup-rxe: note: ulimit -l is $(ulimit -l) KiB here; kv-server and its clients need more (docs/operations.md)"
fi
