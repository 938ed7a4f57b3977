/**
 * The `basic` binding, mirroring YCSB's BasicDB: does nothing and answers OK. With
 * basicdb.verbose (default true, as in YCSB) it prints every operation with its table, key and
 * fields; basicdb.simulatedelay=N sleeps up to N ms per operation (a random 0..N-1 unless
 * basicdb.randomizedelay=false). It is the harness's own cost baseline.
 */
import type { Properties } from '../properties.js';
import { Random } from '../random.js';
import { Status, type DB, type FieldValues } from './db.js';
import { ReadResult } from './read-result.js';

const sleeper = new Int32Array(new SharedArrayBuffer(4));

export default class BasicDB implements DB {
  private verbose = true;
  private randomizeDelay = true;
  private toDelay = 0;
  private readonly rng = new Random();
  private out: (line: string) => void = (line) => process.stdout.write(line + '\n');

  init(props: Properties): void {
    this.verbose = props.getBoolean('basicdb.verbose', true);
    this.toDelay = props.getInt('basicdb.simulatedelay', 0);
    this.randomizeDelay = props.getBoolean('basicdb.randomizedelay', true);
    if (this.verbose) {
      const lines = ['***************** properties *****************'];
      for (const [k, v] of props.entries()) lines.push(`"${k}"="${v}"`);
      lines.push('**********************************************');
      this.out(lines.join('\n'));
    }
  }

  /** Where verbose lines go (stdout by default; tests capture them). */
  setOutput(out: (line: string) => void): void {
    this.out = out;
  }

  /** Blocks the thread like YCSB's LockSupport.parkNanos: a synchronous binding has no event loop to yield to. */
  private delay(): void {
    if (this.toDelay <= 0) return;
    const ms = this.randomizeDelay ? this.rng.nextBelow(this.toDelay) : this.toDelay;
    if (ms > 0) Atomics.wait(sleeper, 0, 0, ms);
  }

  read(table: string, key: string, fields: readonly string[] | null, _result: ReadResult): Status {
    this.delay();
    if (this.verbose) this.out(`READ ${table} ${key} [ ${fieldList(fields)}]`);
    return Status.OK;
  }

  scan(table: string, startKey: string, recordCount: number, fields: readonly string[] | null, _result: ReadResult[]): Status {
    this.delay();
    if (this.verbose) this.out(`SCAN ${table} ${startKey} ${recordCount} [ ${fieldList(fields)}]`);
    return Status.OK;
  }

  update(table: string, key: string, values: FieldValues): Status {
    this.delay();
    if (this.verbose) this.out(`UPDATE ${table} ${key} [ ${valueList(values)}]`);
    return Status.OK;
  }

  insert(table: string, key: string, values: FieldValues): Status {
    this.delay();
    if (this.verbose) this.out(`INSERT ${table} ${key} [ ${valueList(values)}]`);
    return Status.OK;
  }

  delete(table: string, key: string): Status {
    this.delay();
    if (this.verbose) this.out(`DELETE ${table} ${key}`);
    return Status.OK;
  }

  cleanup(): void {}
}

function fieldList(fields: readonly string[] | null): string {
  return fields === null ? '<all fields>' : fields.map((f) => f + ' ').join('');
}

function valueList(values: FieldValues): string {
  let s = '';
  for (let i = 0; i < values.size; i++) s += `${values.fieldName(i)}=${values.fieldValue(i)} `;
  return s;
}
