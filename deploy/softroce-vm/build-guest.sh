#!/bin/bash
# Builds the Soft-RoCE guest, or finds it in the cache: Debian's stock 6.1
# kernel (unpacked from its .deb, never installed) and a tiny initramfs with
# busybox-static, the rdma_rxe/9p/virtio modules and our /init.
# Prints the guest's directory (kernel, initramfs.cpio.gz, info) on stdout.
# The cache entry is keyed by kernel version + a hash of the files that go into
# the image, so editing them rebuilds it. Cache: $RKV_VM_CACHE, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/rdma-kv/softroce-vm.
set -euo pipefail

KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${RKV_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-kv/softroce-vm}
# Loaded in this order, each after its dependencies. crc32_generic: rdma_rxe
# needs the "crc32" crypto hash when a device is created but does not declare
# it; without it `rdma link add` fails with "No such file or directory".
MODULES="crc32_generic virtio_pci 9pnet_virtio 9p rdma_rxe rdma_ucm ib_umad dummy veth virtio_net"

log() { echo "build-guest: $*" >&2; }

mkdir -p "$CACHE/debs"
exec 9>"$CACHE/.lock"
flock 9   # concurrent runs wait for one builder, then reuse its result

KITHASH=$(cat "$KIT/build-guest.sh" "$KIT/init" | sha256sum | cut -c1-12)

# linux-image-amd64 is a metapackage: its dependency names the real image,
# e.g. "Depends: linux-image-6.1.0-56-amd64 (= 6.1.192-2)". One apt-cache call:
# each parses the whole apt lists (about a second).
read -r KPKG PKGVER < <(apt-cache show --no-all-versions linux-image-amd64 2>/dev/null |
  sed -n 's/^Depends: \(linux-image-[0-9][^ ,]*\) (= \([^)]*\)).*/\1 \2/p') || true
if [ -z "${KPKG:-}" ]; then
  # Offline or no apt lists: a guest built from these kit files still serves.
  for ready in "$CACHE"/guest-*-"$KITHASH"/ready; do
    [ -f "$ready" ] || continue
    log "apt cannot resolve linux-image-amd64; reusing $(dirname "$ready")"
    dirname "$ready"
    exit 0
  done
  log "apt cannot resolve linux-image-amd64: run apt-get update (deploy/softroce-vm/setup-host.sh)"
  exit 1
fi
KVER=${KPKG#linux-image-}
GUEST=$CACHE/guest-$KVER-$PKGVER-$KITHASH
if [ -f "$GUEST/ready" ]; then
  echo "$GUEST"
  exit 0
fi

log "building $GUEST"
WORK=$(mktemp -d "$CACHE/.build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

DEB=$CACHE/debs/${KPKG}_${PKGVER}_amd64.deb
if [ ! -f "$DEB" ]; then
  rm -f "$CACHE"/debs/*.deb   # keep only the current kernel package
  log "downloading $KPKG $PKGVER"
  # Sandbox::User=root: the cache is under a private home that _apt cannot enter.
  (cd "$WORK" && apt-get download -q -o APT::Sandbox::User=root "$KPKG=$PKGVER" >&2)
  mv "$WORK"/*.deb "$DEB"
fi
K=$WORK/kernel
dpkg -x "$DEB" "$K"
depmod -b "$K" "$KVER"   # modules.dep is made by the package's postinst, not shipped

OUT=$WORK/guest
mkdir -p "$OUT"
# QEMU boots an uncompressed ELF vmlinux directly (PVH entry point): no
# real-mode setup and no decompression, which halves the boot under TCG.
# It is the xz payload of the bzImage; fall back to the bzImage itself.
BZ=$K/boot/vmlinuz-$KVER
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$BZ" | head -n1 | cut -d: -f1) || true
if [ -n "$off" ]; then
  # tail dies of SIGPIPE once xz has its stream: judge by the result instead.
  tail -c +$((off + 1)) "$BZ" | xz -dc --single-stream >"$OUT/kernel" 2>/dev/null || true
fi
if [ "$(head -c4 "$OUT/kernel" 2>/dev/null | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
  BOOT="vmlinux (PVH)"
else
  log "could not extract an ELF vmlinux; booting the bzImage"
  cp "$BZ" "$OUT/kernel"
  BOOT="bzImage"
fi

# The initramfs: merged-/usr layout like the host (Debian 12), so that once
# the host's /usr is mounted over 9p, /bin, /lib and /lib64 resolve into it.
R=$WORK/root
mkdir -p "$R"/{bbin,modules,proc,sys,dev,usr,etc,tmp,var/tmp,run/rkv,root}
chmod 1777 "$R/tmp" "$R/var/tmp"
for d in bin sbin lib lib64; do ln -s "usr/$d" "$R/$d"; done
ln -s /run "$R/var/run"
BUSYBOX=$(command -v busybox)
if ldd "$BUSYBOX" >/dev/null 2>&1; then   # ldd fails on a static binary
  log "$BUSYBOX is not static: install busybox-static"
  exit 1
fi
cp "$BUSYBOX" "$R/bbin/busybox"
for a in $("$BUSYBOX" --list); do
  [ "$a" = busybox ] || ln -s busybox "$R/bbin/$a"
done
for m in $MODULES; do
  modprobe -d "$K" -S "$KVER" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r ko; do
  cp "$ko" "$R/modules/"
  basename "$ko" >>"$R/modules/load-order"
done
install -m 755 "$KIT/init" "$R/init"
(cd "$R" && find . | "$BUSYBOX" cpio -o -H newc -R 0:0 2>/dev/null | gzip -1) >"$OUT/initramfs.cpio.gz"

cat >"$OUT/info" <<EOF
kernel package: $KPKG $PKGVER
kernel release: $KVER
boot: $BOOT
kit hash: $KITHASH
modules: $(tr '\n' ' ' <"$R/modules/load-order")
EOF
touch "$OUT/ready"
rm -rf "$CACHE"/guest-*   # older kernels or kit versions
mv "$OUT" "$GUEST"
log "ready: $BOOT, initramfs $(du -h "$GUEST/initramfs.cpio.gz" | cut -f1)"
echo "$GUEST"
