#!/bin/sh
# Runs inside the Soft-RoCE guest, where run-guest.sh has put rxe0 on a dummy
# netdev with 10.77.0.1 and 10.77.0.2:
#   deploy/softroce-vm/run-guest.sh 'sh deploy/softroce-vm/guest/bench-ratio.sh'
# Measures one READ (64 B) and one CAS with perftest and with rdma-kv's
# transport microbenchmark on the same device in the same guest, and a GET
# through KvClient against a server child on rxe0 (the data-path benchmark,
# sequential gets only), and prints each median over perftest's typical READ
# (or CAS) latency with issue 14's goal for it (bench/kv/data-path/goals.ts).
# Absolute numbers under TCG mean little; the ratios say how much the addon
# and the client add over bare verbs. Also writes bench/results/rxe-ratio.json,
# whose READ and GET rows the data-path benchmark shows on the host.
# Env: ITERS (perftest iterations, default 2000); GET_KEYS (default 1000) and
# GET_SECONDS (default 3): the data-path run's keys and seconds per phase.
# It runs after the rxe tier's tests, in what RKV_VM_TIMEOUT leaves them
# (600 s by default, run-tier.sh): every step has a time limit (perftest
# 120 s per tool, the microbenchmark 180 s, the data-path run 120 s), so a
# stalled step costs its row, never the tier.
set -eu

cd "$(dirname "$0")/../../.."
DEV=rxe0
SERVER=10.77.0.1
CLIENT=10.77.0.2
PORT=18515
ITERS=${ITERS:-2000}
MICROBENCH=dist/bench/transport/microbench.js
DATA_PATH=dist/bench/kv/data-path.js
KV_PORT=18517
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
# run-guest.sh makes ksoftirqd SCHED_BATCH (unless RKV_SOFTIRQ_BATCH=0): READs
# cost a context switch per request otherwise (docs/softroce-vm.md). Recorded
# with the results, as it changes what perftest and rdma-kv both measure.
SOFTIRQ_POLICY=$(chrt -p "$(pgrep '^ksoftirqd/' | head -n 1)" 2>/dev/null | sed -n 's/.*scheduling policy: //p')
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

echo "bench-ratio: perftest on $DEV, server $SERVER (GID $SGID), client $CLIENT (GID $CGID), $ITERS iterations, ksoftirqd ${SOFTIRQ_POLICY:-unknown}"
READ_US=$(perftest read ib_read_lat -s 64)
CAS_US=$(perftest cas ib_atomic_lat -A CMP_AND_SWAP)
# A READ of a GET's value size too: under TCG rxe's per-byte work (copies, the
# packet's ICRC in software) makes a 1 KiB READ ~2x a 64 B one, so a GET is also
# shown against a bare READ of its own size. Informational: no goal, no failure.
GET_BYTES=${GET_BYTES:-1024}
VALUE_READ_US=$(perftest read-value ib_read_lat -s "$GET_BYTES") || VALUE_READ_US=
if [ -z "$READ_US" ] || [ -z "$CAS_US" ]; then
  echo "bench-ratio: could not parse perftest's latency (read '$READ_US', cas '$CAS_US')" >&2
  exit 1
fi

status=0
if [ -f "$MICROBENCH" ]; then
  MB_JSON=$TMP/microbench.json
  if ! timeout -k 10 180 node "$MICROBENCH" --url "rdma://$SERVER:0" --batch 1 --json "$MB_JSON"; then
    echo "bench-ratio: $MICROBENCH failed; rdma-kv column left empty" >&2
    status=1
  fi
  MB_VALUE_JSON=$TMP/microbench-value.json
  timeout -k 10 180 node "$MICROBENCH" --url "rdma://$SERVER:0" --batch 1 --ops READ --bytes "$GET_BYTES" --json "$MB_VALUE_JSON" >/dev/null ||
    MB_VALUE_JSON=
else
  MB_JSON=
  MB_VALUE_JSON=
  echo "bench-ratio: $MICROBENCH does not exist (not built, or not written yet); rdma-kv column skipped"
fi

# A GET through KvClient: the data-path benchmark with its server child on
# rxe0's first address, sequential gets only (no redis, no main job, no floor:
# the rows above are this guest's floor).
DP_JSON=
if [ -f "$DATA_PATH" ]; then
  DP_JSON=$TMP/data-path.json
  if ! timeout -k 10 120 node "$DATA_PATH" --listen "rdma://$SERVER:$KV_PORT" --phases get --skip redis,main-job,floor \
    --keys "${GET_KEYS:-1000}" --seconds "${GET_SECONDS:-3}" --value-bytes "$GET_BYTES" --json "$DP_JSON"; then
    echo "bench-ratio: $DATA_PATH failed; the GET row is left empty" >&2
    DP_JSON=
    status=1
  fi
else
  echo "bench-ratio: $DATA_PATH does not exist (not built); the GET row is left empty"
fi

mkdir -p "$(dirname "$OUT")"
node --input-type=module - "$READ_US" "$CAS_US" "$MB_JSON" "$DP_JSON" "$OUT" "$ITERS" "${SOFTIRQ_POLICY:-unknown}" "$GET_BYTES" "$VALUE_READ_US" "${MB_VALUE_JSON:-}" <<'EOF'
import fs from "node:fs";
import os from "node:os";
import { pathToFileURL } from "node:url";
const [readUs, casUs, mbPath, dpPath, out, iters, softirqPolicy, getBytes, valueReadUs, mbValuePath] = process.argv.slice(2);
const readJson = (path) => (path && fs.existsSync(path) ? JSON.parse(fs.readFileSync(path, "utf8")) : undefined);
// The goals and their verdicts are the data-path benchmark's: issue 14's numbers in one place.
const { GOALS, goal, verdict } = await import(pathToFileURL("dist/bench/kv/data-path/goals.js").href);
const mb = readJson(mbPath)?.results ?? [];
const dp = readJson(dpPath);
const microbenchMedian = (op, results = mb) => results.find((x) => x.op === op && x.batch === 1)?.medianLatencyUs ?? null;
const mbValue = readJson(mbValuePath)?.results ?? [];
// The median sequential GET. Once the client answers most GETs in one READ from a
// cache of locations (a 1-RTT hit rate over 50 %), the median GET is a cache hit.
const getUs = dp?.phases?.rdmaKv?.get?.latencyUs?.p50 ?? null;
const hitRate = dp?.oneRoundTripPercent;
const cachedUs = typeof hitRate === "number" && hitRate > 50 ? getUs : null;
const cachedAbsent = dp === undefined ? "missing" : typeof hitRate === "number" ? `${hitRate.toFixed(0)} % hits` : hitRate;
const readLat = { perftest: "ib_read_lat -s 64", perftestTypicalUs: Number(readUs) };
const valueBytes = dp?.config?.valueBytes ?? null;
const rows = [
  { op: "READ", size: 64, ...readLat, rdmaKvMedianUs: microbenchMedian("READ"), limit: GOALS.guestReadVsPerftest },
  { op: "CAS", size: 8, perftest: "ib_atomic_lat -A CMP_AND_SWAP", perftestTypicalUs: Number(casUs), rdmaKvMedianUs: microbenchMedian("CAS") },
  { op: "GET", size: valueBytes, ...readLat, rdmaKvMedianUs: getUs, limit: GOALS.guestGetVsPerftest },
  { op: "GET (cache hit)", size: valueBytes, ...readLat, rdmaKvMedianUs: cachedUs, limit: GOALS.guestCachedGetVsPerftest, ...(cachedUs === null ? { absent: cachedAbsent } : {}) },
  // Informational (no goal): the same READ and GET against a bare READ of the value's size.
  ...(valueReadUs ? [
    { op: "READ", size: Number(getBytes), perftest: `ib_read_lat -s ${getBytes}`, perftestTypicalUs: Number(valueReadUs), rdmaKvMedianUs: microbenchMedian("READ", mbValue) },
    { op: "GET / READ of its size", size: valueBytes, perftest: `ib_read_lat -s ${getBytes}`, perftestTypicalUs: Number(valueReadUs), rdmaKvMedianUs: getUs },
  ] : []),
].map(({ limit, ...r }) => {
  const ratio = r.rdmaKvMedianUs === null ? null : +(r.rdmaKvMedianUs / r.perftestTypicalUs).toFixed(2);
  if (limit === undefined) return { ...r, ratio, goal: null, met: null };
  const g = goal(`≤ ${limit}×`, ratio ?? undefined, limit, true, r.absent);
  return { ...r, ratio, goal: g.text, met: verdict(g) };
});
const num = (v) => (v === null ? "-" : v.toFixed(2));
const table = [["op", "perftest typical µs", "rdma-kv median µs", "ratio", "goal", "met?"]].concat(
  rows.map((r) => [`${r.op}${r.size ? ` ${r.size} B` : ""}`, num(r.perftestTypicalUs), r.rdmaKvMedianUs === null ? (r.absent ?? "-") : num(r.rdmaKvMedianUs), num(r.ratio), r.goal ?? "-", r.met ?? "-"]));
const widths = table[0].map((_, i) => Math.max(...table.map((row) => row[i].length)));
for (const row of table) console.log(row.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join(" | "));
fs.writeFileSync(out, JSON.stringify({
  device: "rxe0 (Soft-RoCE in a QEMU TCG guest)",
  kernel: os.release(),
  ksoftirqdPolicy: softirqPolicy,
  date: new Date().toISOString(),
  perftestIterations: Number(iters),
  microbench: mbPath ? "dist/bench/transport/microbench.js --batch 1" : "missing",
  dataPath: dp ? `dist/bench/kv/data-path.js --phases get: ${dp.config.keys} keys, ${dp.config.secondsPerPhase} s, server ${dp.config.server}` : "missing",
  rows,
}, null, 2) + "\n");
console.log(`bench-ratio: wrote ${out}`);
EOF
exit $status
