#!/bin/sh
# Runs inside the Soft-RoCE guest, where run-guest.sh has put rxe0 on a dummy
# netdev with 10.77.0.1 and 10.77.0.2:
#   deploy/softroce-vm/run-guest.sh 'sh deploy/softroce-vm/guest/bench-ratio.sh'
# Measures one READ (64 B) and one CAS with perftest and with rdma-kv's
# transport microbenchmark on the same device in the same guest, and prints
# their ratio. Absolute numbers under TCG mean little; the ratio says how much
# the addon adds over bare verbs. Also writes bench/results/rxe-ratio.json.
# Env: ITERS (perftest iterations, default 2000).
set -eu

cd "$(dirname "$0")/../../.."
DEV=rxe0
SERVER=10.77.0.1
CLIENT=10.77.0.2
PORT=18515
ITERS=${ITERS:-2000}
MICROBENCH=dist/bench/transport/microbench.js
OUT=bench/results/rxe-ratio.json
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# The GID index of an IPv4 address on $DEV: the RoCE v2 entry holding the
# IPv4-mapped GID ::ffff:a.b.c.d (with run-guest.sh's setup, 1 and 2).
gid_index() {
  want=$(echo "$1" | awk -F. '{ printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4 }')
  port=/sys/class/infiniband/$DEV/ports/1
  for f in "$port"/gids/*; do
    i=${f##*/}
    if [ "$(cat "$f")" = "$want" ] &&
      [ "$(cat "$port/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ]; then
      echo "$i"
      return
    fi
  done
  echo "bench-ratio: no RoCE v2 GID for $1 on $DEV" >&2
  return 1
}
SGID=$(gid_index $SERVER)
CGID=$(gid_index $CLIENT)

# perftest NAME TOOL ARGS...: server on $SERVER's GID, client on $CLIENT's,
# prints the client's t_typical (or median) latency in µs.
perftest() {
  name=$1
  shift
  timeout 120 "$@" -d $DEV -x "$SGID" -p $PORT -n "$ITERS" -F >"$TMP/$name.server" 2>&1 &
  server=$!
  # The client does not retry: wait until the server listens on its TCP port.
  tries=0
  until ss -ltn "sport = :$PORT" | grep -q LISTEN; do
    tries=$((tries + 1))
    if [ $tries -gt 300 ] || ! kill -0 $server 2>/dev/null; then
      echo "bench-ratio: $name server did not start:" >&2
      cat "$TMP/$name.server" >&2
      return 1
    fi
    sleep 0.1
  done
  if ! timeout 120 "$@" -d $DEV -x "$CGID" -p $PORT -n "$ITERS" -F $SERVER >"$TMP/$name.client" 2>&1 ||
    ! wait $server; then
    echo "bench-ratio: $name failed:" >&2
    cat "$TMP/$name.client" "$TMP/$name.server" >&2
    return 1
  fi
  awk '/t_(typical|median)/ { for (i = 1; i <= NF; i++) if ($i ~ /^t_(typical|median)/) col = i; next }
       col && $1 ~ /^[0-9]+$/ { print $col; exit }' "$TMP/$name.client"
}

echo "bench-ratio: perftest on $DEV, server $SERVER (GID $SGID), client $CLIENT (GID $CGID), $ITERS iterations"
READ_US=$(perftest read ib_read_lat -s 64)
CAS_US=$(perftest cas ib_atomic_lat -A CMP_AND_SWAP)
if [ -z "$READ_US" ] || [ -z "$CAS_US" ]; then
  echo "bench-ratio: could not parse perftest's latency (read '$READ_US', cas '$CAS_US')" >&2
  exit 1
fi

status=0
if [ -f "$MICROBENCH" ]; then
  MB_JSON=$TMP/microbench.json
  if ! timeout 600 node "$MICROBENCH" --url "rdma://$SERVER:0" --batch 1 --json "$MB_JSON"; then
    echo "bench-ratio: $MICROBENCH failed; rdma-kv column left empty" >&2
    status=1
  fi
else
  MB_JSON=
  echo "bench-ratio: $MICROBENCH does not exist (not built, or not written yet); rdma-kv column skipped"
fi

mkdir -p "$(dirname "$OUT")"
node - "$READ_US" "$CAS_US" "$MB_JSON" "$OUT" "$ITERS" <<'EOF'
const fs = require("fs");
const os = require("os");
const [readUs, casUs, mbPath, out, iters] = process.argv.slice(2);
let mb = [];
if (mbPath && fs.existsSync(mbPath)) mb = JSON.parse(fs.readFileSync(mbPath, "utf8")).results || [];
const median = (op) => {
  const r = mb.find((x) => x.op === op && x.batch === 1);
  return r && typeof r.medianLatencyUs === "number" ? r.medianLatencyUs : null;
};
const rows = [
  { op: "READ", size: 64, perftest: "ib_read_lat", perftestTypicalUs: Number(readUs) },
  { op: "CAS", size: 8, perftest: "ib_atomic_lat -A CMP_AND_SWAP", perftestTypicalUs: Number(casUs) },
].map((r) => {
  const m = median(r.op);
  return { ...r, rdmaKvMedianUs: m, ratio: m === null ? null : +(m / r.perftestTypicalUs).toFixed(2) };
});
const cell = (v, w) => (v === null ? "-" : v.toFixed(2)).padStart(w);
console.log("op   | perftest typical µs | rdma-kv median µs | ratio");
for (const r of rows) {
  console.log(`${r.op.padEnd(4)} | ${cell(r.perftestTypicalUs, 19)} | ${cell(r.rdmaKvMedianUs, 17)} | ${cell(r.ratio, 5)}`);
}
fs.writeFileSync(out, JSON.stringify({
  device: "rxe0 (Soft-RoCE in a QEMU TCG guest)",
  kernel: os.release(),
  date: new Date().toISOString(),
  perftestIterations: Number(iters),
  microbench: mbPath ? "dist/bench/transport/microbench.js --batch 1" : "missing",
  rows,
}, null, 2) + "\n");
console.log(`bench-ratio: wrote ${out}`);
EOF
exit $status
