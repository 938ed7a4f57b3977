#!/bin/bash
# Installs the Debian packages the Soft-RoCE guest kit needs on the host.
# The guest boots Debian's kernel but runs the host's /usr (shared read-only),
# so everything used inside the guest (rdma-core, perftest, node) is installed
# here, on the host.
#   setup-host.sh          install what is missing; a no-op when all is present
#   setup-host.sh --check  print one line saying what is missing and exit 1,
#                          or exit 0 (used by run-tier.sh to decide on skipping)
set -euo pipefail

PACKAGES=(
  qemu-system-x86    # the guest, under TCG (the host kernel has no InfiniBand)
  busybox-static     # the initramfs userland: static, the initramfs has no libc
  kmod               # depmod/modprobe resolve module dependencies for the initramfs
  xz-utils           # unpacks the uncompressed vmlinux out of the bzImage
  iproute2           # ip (dummy netdev) and rdma (rdma link add ... type rxe)
  rdma-core ibverbs-providers ibverbs-utils  # libibverbs' rxe provider, ibv_devinfo
  libibverbs-dev librdmacm-dev               # so the addon builds its verbs provider
  perftest rdmacm-utils                      # reference latencies (bench-ratio.sh)
)

missing() {
  local p
  for p in "${PACKAGES[@]}"; do
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || echo "$p"
  done
}

if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
  echo "not a Debian-based host (dpkg-query/apt-get not found)"
  exit 1
fi

todo=$(missing | tr '\n' ' ')
if [ "${1:-}" = --check ]; then
  [ -z "$todo" ] && exit 0
  echo "missing Debian packages: ${todo% } (install them, or run scripts/setup-test-host.sh)"
  exit 1
fi

SUDO=()
[ "$(id -u)" = 0 ] || SUDO=(sudo -n)
export DEBIAN_FRONTEND=noninteractive
# build-guest.sh resolves the kernel package from the apt lists: refresh them
# when packages are missing or when the lists do not know the kernel yet.
if [ -n "$todo" ] || ! apt-cache show linux-image-amd64 >/dev/null 2>&1; then
  "${SUDO[@]}" apt-get update -qq
fi
if [ -n "$todo" ]; then
  echo "setup-host: installing ${todo% }" >&2
  # shellcheck disable=SC2086 # one word per package
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends $todo >/dev/null
fi
todo=$(missing | tr '\n' ' ')
if [ -n "$todo" ]; then
  echo "setup-host: still missing after apt-get install: ${todo% }" >&2
  exit 1
fi
echo "setup-host: all packages present" >&2
