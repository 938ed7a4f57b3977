/**
 * One YCSB ClientThread: a closed loop (or `inflight` concurrent closed loops) issuing this
 * thread's share of operations, with YCSB's per-thread deadline throttling for -target:
 * operation n may not start before start + n * (1 / target-per-thread), and that deadline is
 * the operation's intended start time. It runs inside a worker_thread, or in the main thread
 * for in-process runs.
 */
import { UsageError } from '../../../protocol/operator-input.js';
import { Properties } from '../properties.js';
import { Random } from '../random.js';
import { isPromise, type Status } from '../db/db.js';
import { createBinding } from '../db/registry.js';
import { CoreWorkload } from '../workload/core-workload.js';
import { parseCoreWorkloadConfig } from '../workload/core-config.js';
import { ThreadMeasurements, parseMeasurementInterval } from '../measurements/thread-measurements.js';
import { DBWrapper, newLane, type Lane } from './db-wrapper.js';
import { GcStats } from './gc-stats.js';
import { CONTROL_EPOCH, CONTROL_STOP, requestStop, type ClientThreadData, type ThreadMessage } from './protocol.js';

const sleeper = new Int32Array(new SharedArrayBuffer(4));
/** how often (in ms of operation time) a client thread reads the control word */
const CONTROL_CHECK_MS = 1;

export async function runClientThread(
  data: ClientThreadData,
  post: (message: ThreadMessage) => void,
  startSignal: Promise<void>,
): Promise<void> {
  const { threadId, control } = data;
  try {
    const gc = new GcStats(data.observeGc);
    const props = new Properties(data.props);
    const config = parseCoreWorkloadConfig(props);
    const rng = new Random(data.seed);
    const workload = new CoreWorkload(config, data.shared, rng, data.transactions);
    const measurements = new ThreadMeasurements(parseMeasurementInterval(props.get('measurement.interval', 'op')) ?? 0);
    const db = new DBWrapper(await createBinding(data.dbName), measurements, props);
    const spinSleep = props.getBoolean('spin.sleep', false);
    post({ type: 'ready', threadId });
    await startSignal;
    gc.begin(); // the phase's runtime starts here, in the main thread

    await db.db.init(props);

    const lanes: Lane[] = [];
    for (let i = 0; i < Math.max(1, data.inflight); i++) {
      lanes.push(newLane(workload.newFieldValues()));
    }
    let seenEpoch = Atomics.load(control, CONTROL_EPOCH);
    const sendSample = (): void => {
      seenEpoch = Atomics.load(control, CONTROL_EPOCH);
      post({ type: 'sample', threadId, epoch: seenEpoch, snapshots: measurements.takeSnapshot() });
    };

    const tickMs = data.targetPerThreadPerMs > 0 ? 1 / data.targetPerThreadPerMs : 0;
    const blockingSleep = lanes.length === 1;
    const sleepUntil = async (deadline: number): Promise<void> => {
      for (let left = deadline - performance.now(); left > 0; left = deadline - performance.now()) {
        if (spinSleep) continue;
        if (blockingSleep) Atomics.wait(sleeper, 0, 0, left); // like LockSupport.parkNanos
        else await new Promise((resolve) => (left > 1 ? setTimeout(resolve, left - 1) : setImmediate(resolve)));
      }
    };
    // spread the threads' first operations when each does at most one per ms (YCSB's GH issue 4)
    if (tickMs > 0 && data.targetPerThreadPerMs <= 1) await sleepUntil(performance.now() + rng.nextBelow(Math.trunc(tickMs * 1e6)) / 1e6);

    const opCount = data.opCount;
    const opsDoneShared = data.opsDone;
    let issued = 0;
    let opsDone = 0;
    let stopped = false;
    let nextControlCheck = 0;
    const startTime = performance.now();

    // A lane's closed loop. It goes on from an asynchronous operation through a then() with the
    // lane's own callbacks, not an `await` in a loop: a suspended async function costs about 200 B
    // of garbage per operation (its reaction and resume closures), a then() about half.
    const runLane = (lane: Lane): Promise<void> =>
      new Promise<void>((laneDone, laneFailed) => {
        /** Counts a finished operation; false when the lane does not go on at once (stopped, or sleeping to its deadline). */
        const finished = (ok: boolean | Status): boolean => {
          if (ok === false) {
            stopped = true;
            laneDone();
            return false;
          }
          opsDone++;
          opsDoneShared[threadId] = opsDone;
          if (tickMs === 0) return true;
          const deadline = startTime + opsDone * tickMs;
          sleepUntil(deadline).then(() => {
            if (measurements.tracksIntended) lane.intendedStart = deadline;
            next();
          }, laneFailed);
          return false;
        };
        const settled = (ok: boolean | Status): void => {
          try {
            if (finished(ok)) next();
          } catch (err) {
            laneFailed(err);
          }
        };
        const next = (): void => {
          try {
            while (!stopped && (opCount === 0 || issued < opCount)) {
              // The main thread bumps the epoch for samples and stops. The shared word is read once per
              // CONTROL_CHECK_MS of operation time, not per operation: an Atomics.load costs as much as
              // a twentieth of a basic-binding operation, and the main thread waits 250 ms for samples.
              if (db.lastEnd >= nextControlCheck) {
                nextControlCheck = db.lastEnd + CONTROL_CHECK_MS;
                if (Atomics.load(control, CONTROL_EPOCH) !== seenEpoch) {
                  sendSample();
                  if (Atomics.load(control, CONTROL_STOP) !== 0) break;
                }
              }
              issued++;
              const ok = data.transactions ? workload.doTransaction(db, lane) : workload.doInsert(db, lane);
              if (isPromise(ok)) {
                ok.then(settled, laneFailed); // a transaction's promise resolves to its Status: truthy
                return;
              }
              if (!finished(ok)) return;
            }
            laneDone();
          } catch (err) {
            laneFailed(err);
          }
        };
        next();
      });
    if (lanes.length === 1) await runLane(lanes[0]!);
    else await Promise.all(lanes.map(runLane));

    await db.cleanup(lanes[0]!);
    post({ type: 'done', threadId, opsDone, snapshots: measurements.takeSnapshot(), gc: await gc.finish() });
  } catch (err) {
    requestStop(control);
    post({ type: 'error', threadId, message: err instanceof Error ? err.message : String(err), usage: err instanceof UsageError });
  }
}
