#!/bin/bash
# Installs everything npm test's tiers need on a fresh Debian or Ubuntu
# machine, so that nothing is skipped:
#   the addon's build with its verbs provider: g++ make python3 pkg-config
#     libibverbs-dev librdmacm-dev
#   programs the shm tier's suites start or run: redis-server memcached
#     etcd-server (etcd) shellcheck systemd (systemd-analyze, systemd-sysusers)
#   the Soft-RoCE guest kit of the rxe tier: deploy/softroce-vm/setup-host.sh
# Idempotent: installs only what is missing; needs no root when nothing is.
# Not root: installs through sudo, or says to run it as root. Then, as the
# user who builds: npm ci && npm test (README.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PACKAGES=(
  g++ make python3 pkg-config libibverbs-dev librdmacm-dev
  redis-server memcached etcd-server shellcheck systemd
)
KIT=deploy/softroce-vm/setup-host.sh

say() { echo "setup-test-host: $*" >&2; }

if ! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then
  say "not a Debian or Ubuntu machine (no apt-get/dpkg-query): install ${PACKAGES[*]} and the Soft-RoCE kit (docs/softroce-vm.md) by hand"
  exit 1
fi

missing() {
  local p
  for p in "${PACKAGES[@]}"; do
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || echo "$p"
  done
}

# Root for apt-get: this user, or sudo (asked only when something is missing).
AS_ROOT=(env DEBIAN_FRONTEND=noninteractive)
as_root() {
  if [ "$(id -u)" != 0 ] && [ "${AS_ROOT[0]}" != sudo ]; then
    if ! command -v sudo >/dev/null; then
      say "installing packages needs root, and sudo is not installed: run $0 as root"
      exit 1
    fi
    say "installing packages needs root: using sudo"
    AS_ROOT=(sudo "${AS_ROOT[@]}")
  fi
  "${AS_ROOT[@]}" "$@"
}

todo=$(missing | tr '\n' ' ')
if [ -n "$todo" ]; then
  say "installing ${todo% }"
  as_root apt-get update -qq
  # shellcheck disable=SC2086 # one word per package
  as_root apt-get install -y -qq --no-install-recommends $todo >/dev/null
  todo=$(missing | tr '\n' ' ')
  if [ -n "$todo" ]; then
    say "still missing after apt-get install: ${todo% }"
    exit 1
  fi
fi
# The kit installs its own packages, and refreshes the apt lists when they
# do not know the kernel its guest boots: as this user when it has neither to do.
if bash "$KIT" --check >/dev/null && apt-cache show linux-image-amd64 >/dev/null 2>&1; then
  bash "$KIT"
else
  as_root bash "$KIT"
fi

# The hugetlb path of the region (test/server/huge-pages.test.ts) needs a few huge
# pages reserved; without them that test says so and checks nothing. 64 of 2 MiB,
# added to vm.nr_hugepages when fewer are free (servers under test that find
# none left use 4 KiB pages, as they would anywhere).
HUGE_WANTED=64
huge_free=$(awk '/^HugePages_Free:/ { print $2 }' /proc/meminfo 2>/dev/null || echo 0)
if [ -w /proc/sys/vm/nr_hugepages ] || [ "$(id -u)" != 0 ]; then
  if [ "${huge_free:-0}" -lt "$HUGE_WANTED" ]; then
    huge_total=$(cat /proc/sys/vm/nr_hugepages)
    if echo $((huge_total + HUGE_WANTED - huge_free)) | as_root tee /proc/sys/vm/nr_hugepages >/dev/null 2>&1; then
      say "reserved hugetlb pages for the tests: vm.nr_hugepages $(cat /proc/sys/vm/nr_hugepages) (was $huge_total)"
    else
      say "note: cannot reserve hugetlb pages (vm.nr_hugepages): the hugetlb region test will say so and check nothing"
    fi
  fi
fi

# An addon built before rdma-core's development files were installed has no
# verbs provider, and npm ci keeps a build that loads: remove it, so that
# npm ci builds it again with the provider the rxe tier needs.
ADDON=build/Release/rdma_kv.node
if [ -f "$ADDON" ] && command -v node >/dev/null &&
  ! node -e 'process.exit(require(process.argv[1]).providers.some((p) => p.scheme === "rdma" && p.built) ? 0 : 1)' "$PWD/$ADDON" 2>/dev/null; then
  say "$ADDON was built without the verbs provider: removing build/ so that npm ci builds it again"
  rm -rf build
fi

# Node is no Debian package here (Debian 12's is too old): only checked.
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 11) ? 0 : 1)' 2>/dev/null; then
  say "note: npm ci needs Node.js >= 20.11 on PATH (found: $(node --version 2>/dev/null || echo none)); install it from https://nodejs.org"
fi
say "ready: npm ci && npm test"
