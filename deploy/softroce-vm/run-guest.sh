#!/bin/bash
# Boots the Soft-RoCE guest and runs one shell command line in it:
#   deploy/softroce-vm/run-guest.sh 'ibv_devinfo -d rxe0 && rdma link'
# The command runs with the host's /bin/sh in the project checkout, which the
# guest mounts read-write at the same path as on the host (so the host-built
# addon, dist/ and node_modules are used as they are). The guest has the
# host's /usr and /etc read-only, no network card, and rxe0 on a dummy netdev
# with 10.77.0.1 and 10.77.0.2. Its output streams to stdout; the script exits
# with the command's exit code, 124 on timeout, 125 if the guest failed to boot.
# Env: RKV_VM_TIMEOUT (s, default 1200), RKV_VM_MEM (MiB, default 4096),
#      RKV_VM_ACCEL (tcg; kvm only where /dev/kvm runs a stock kernel),
#      RKV_VM_CACHE (see build-guest.sh). CI and RKV_* (but RKV_VM_*) are
#      passed to the command.
set -euo pipefail

KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROJECT=$(cd "$KIT/../.." && pwd)
TIMEOUT=${RKV_VM_TIMEOUT:-1200}
MEM=${RKV_VM_MEM:-4096}
# TCG by default: this machine's /dev/kvm is kvm_pvm, which cannot boot a stock
# kernel (hangs, or pauses QEMU on "KVM internal error").
ACCEL=${RKV_VM_ACCEL:-tcg}
if [ "$ACCEL" = kvm ]; then CPU=host; else CPU=max; fi

if [ $# -eq 0 ]; then
  echo "usage: $0 'shell command line'" >&2
  exit 2
fi

GUEST=$("$KIT/build-guest.sh")
CTL=$(mktemp -d "${TMPDIR:-/tmp}/rkv-vm.XXXXXX")
trap 'rm -rf "$CTL"' EXIT
echo "$PROJECT" >"$CTL/project"

# Single-quote a value for sh.
quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
{
  echo "export HOME=/root TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  while IFS= read -r name; do
    echo "export $name=$(quote "${!name}")"
  done < <(compgen -e | grep -E '^(CI|RKV_.*)$' | grep -v '^RKV_VM_')
  echo "cd $(quote "$PROJECT")"
  cat <<'EOF'
export RKV_RDMA_ADDRS=10.77.0.1,10.77.0.2 RKV_TEST_PROVIDERS=rdma
ulimit -l unlimited   # memory registration pins pages
# Two addresses on one rxe device stand for two hosts: rxe in 6.1 is not
# namespace-aware and two rxe devices in one kernel cannot reach each other.
# Named rxenet0 because loading `dummy` already creates dummy0. The rxe device
# is made by the script real hosts use (deploy/softroce/setup-rxe.sh), so
# every run of the guest runs it too.
if ! { ip link add rxenet0 type dummy &&
       ip addr add 10.77.0.1/24 dev rxenet0 &&
       ip addr add 10.77.0.2/24 dev rxenet0 &&
       ip link set rxenet0 up &&
       bash deploy/softroce/setup-rxe.sh --netdev rxenet0 --name rxe0; }; then
  echo "run-guest: could not create rxe0 on rxenet0" >&2
  exit 125
fi
# ksoftirqd must not preempt a busy poller on wakeup (docs/softroce-vm.md, "The
# READ anomaly"). Both ends on one rxe device means every packet is delivered
# in the sender's process context, and rxe 6.1 hands each READ request to a
# tasklet: tasklet_schedule from process context wakes ksoftirqd, which
# preempts the requester on its way out of ibv_post_send (the tasklet itself
# has already run inline) -- a context switch per READ that TCG makes cost
# ~150 us to a Node process. SCHED_BATCH threads are not woken into the CPU;
# they still get their fair share at the tick. On separate hosts a READ
# request arrives in softirq context and wakes nobody. RKV_SOFTIRQ_BATCH=0
# keeps the kernel's default, to see the anomaly.
if [ "${RKV_SOFTIRQ_BATCH:-1}" != 0 ]; then
  for pid in $(pgrep '^ksoftirqd/'); do chrt --batch -p 0 "$pid" >/dev/null; done
fi
EOF
  printf '%s\n' "$*"
} >"$CTL/cmd"

V9=security_model=none,multidevs=remap
set +e
timeout -k 10 "$TIMEOUT" qemu-system-x86_64 \
  -nodefaults -no-user-config -nic none -display none -no-reboot \
  -machine q35,accel="$ACCEL" -cpu "$CPU" -smp 2 -m "$MEM" \
  -kernel "$GUEST/kernel" -initrd "$GUEST/initramfs.cpio.gz" \
  -append "console=ttyS0 quiet panic=-1" \
  -serial file:"$CTL/console.log" -serial stdio \
  -virtfs "local,path=/usr,mount_tag=hostusr,readonly=on,$V9" \
  -virtfs "local,path=/etc,mount_tag=hostetc,readonly=on,$V9" \
  -virtfs "local,path=$CTL,mount_tag=rkvctl,$V9" \
  -virtfs "local,path=$PROJECT,mount_tag=project,$V9" \
  </dev/null
qrc=$?
set -e

if [ -f "$CTL/rc" ]; then
  exit "$(cat "$CTL/rc")"
fi
if [ $qrc = 124 ] || [ $qrc = 137 ]; then
  echo "run-guest: timed out after $TIMEOUT s (RKV_VM_TIMEOUT); the guest was stopped" >&2
  status=124
else
  echo "run-guest: the guest did not run the command (qemu exited $qrc, accel=$ACCEL)" >&2
  status=125
fi
echo "run-guest: last lines of the guest's boot log:" >&2
tail -n 25 "$CTL/console.log" >&2 || true
exit $status
