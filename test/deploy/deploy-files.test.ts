// Every file in deploy/ is checked here, in npm test's host tier, so CI finds
// a broken unit, image definition, manifest, script or dashboard before an
// operator does. Each check also runs on a broken copy, to show it can fail.
// The checks themselves are in ./checks.ts.
//
// Tools from Debian: systemd (systemd-analyze, systemd-sysusers) and
// shellcheck; scripts/setup-test-host.sh installs them. A missing tool skips
// the tests that need it, or fails them under CI=true (../helpers/tools.ts).
import { spawnSync } from 'node:child_process';
import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import test from 'ava';
import { Histogram, Registry } from 'prom-client';

import { ClientMetrics } from '../../client/metrics.js';
import { METRICS, createRegistry } from '../../server/metrics.js';
import { type Tool, needing } from '../helpers/tools.js';
import { freePort, kvServer, startServerProcess } from '../server/helpers.js';
import {
  DEPLOY,
  ROOT,
  applySysusers,
  dashboardProblems,
  execStartArgs,
  filesUnder,
  imagePolicy,
  k8sProblems,
  lintDockerfile,
  shellScripts,
  shellcheck,
  tempDir,
  unitSettings,
  unknownOptions,
  verifyUnit,
} from './checks.js';

/** `test` where the tool is installed; else skipped, or failed under CI=true. */
const needs = (tool: Tool) => needing(test, tool);

const read = (path: string) => readFileSync(join(DEPLOY, path), 'utf8');

/** A temp directory, removed when the test ends. */
function scratch(t: { teardown(fn: () => void): void }): string {
  const dir = tempDir();
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A copy of deploy/k8s in dir, with one file changed. */
function k8sCopy(dir: string, file: string, edit: (text: string) => string): string {
  cpSync(join(DEPLOY, 'k8s'), dir, { recursive: true });
  writeFileSync(join(dir, file), edit(readFileSync(join(dir, file), 'utf8')));
  return dir;
}

/** A string replaced, and proof that it was there to replace. */
function replace(text: string, from: string | RegExp, to: string): string {
  const out = text.replace(from, to);
  if (out === text) throw new Error(`${String(from)} is not in the file: update this negative case`);
  return out;
}

// ---------------------------------------------------------------- systemd

const UNIT = read('systemd/kv-server.service');
/** The unit's program, /usr/local/bin/kv-server, exists only where the package is installed globally. */
const INSTALLED_PATH = '/usr/local/bin/kv-server';
/**
 * systemd-analyze verify fails when ExecStart's program does not exist, so
 * it verifies a copy whose program is this checkout's bin/kv-server.js (the
 * file npm links to that path). Nothing else in the copy differs.
 */
const unitWithProgram = (program: string) => replace(UNIT, `ExecStart=${INSTALLED_PATH} `, `ExecStart=${program} `);

needs('systemd-analyze')('systemd: systemd-analyze verify passes the unit and prints nothing about it', (t) => {
  t.deepEqual(verifyUnit(unitWithProgram(join(ROOT, 'bin/kv-server.js'))), []);
});

needs('systemd-analyze')('systemd: verify catches an unknown key, a bad value and a missing program', (t) => {
  const good = unitWithProgram(join(ROOT, 'bin/kv-server.js'));
  const typo = verifyUnit(replace(good, 'LimitMEMLOCK=infinity', 'LimitMEMLOK=infinity'));
  t.true(typo.some((line) => line.includes("Unknown key 'LimitMEMLOK'")), typo.join('\n'));
  const badValue = verifyUnit(replace(good, 'Restart=on-failure', 'Restart=sometimes'));
  t.true(badValue.some((line) => line.includes('sometimes')), badValue.join('\n'));
  const missing = verifyUnit(unitWithProgram('/nonexistent/kv-server'));
  t.true(missing.some((line) => line.includes('/nonexistent/kv-server')), missing.join('\n'));
});

needs('systemd-sysusers')('systemd: the sysusers file creates the User= and Group= of the unit', (t) => {
  const { problems, passwd } = applySysusers(read('systemd/rdma-kv.sysusers'));
  t.deepEqual(problems, []);
  const settings = new Map(unitSettings(UNIT));
  const entry = passwd.split('\n').find((line) => line.startsWith(`${settings.get('User')}:`));
  t.truthy(entry, `systemd-sysusers made no user ${settings.get('User')}:\n${passwd}`);
  t.is(settings.get('Group'), settings.get('User'), 'the user is created with a group of its own name');
  const broken = applySysusers(replace(read('systemd/rdma-kv.sysusers'), /^u rdma-kv/m, 'x rdma-kv'));
  t.notDeepEqual(broken.problems, [], 'a broken sysusers file must be reported');
});

test('systemd: the ExecStart command line starts a kv-server that gets ready and stops with exit 0', async (t) => {
  // The unit's own arguments; only what systemd or this host provides is
  // replaced: the credential and state directories, the socket directory,
  // and the metrics port (a free one, so a busy 9464 cannot fail the test).
  const dir = scratch(t);
  writeFileSync(join(dir, 'token'), 'a-test-token\n');
  const port = String(await freePort());
  const args = execStartArgs(UNIT, { CREDENTIALS_DIRECTORY: dir, STATE_DIRECTORY: dir }).map((arg) =>
    arg.replace('/run/rdma-kv/', `${dir}/`).replace(/^9464$/, port),
  );
  t.deepEqual(unknownOptions(args, 'ExecStart'), []);
  t.true(args.includes('--region-file') && args.includes('--token-file'), args.join(' '));
  const server = await startServerProcess(args);
  t.true(server.banner.some((line) => /^kv-server: clients must present a token of .*token \(1 write, 0 read; SIGHUP rereads it\)$/.test(line)), server.banner.join('\n'));
  t.true(server.banner.some((line) => line.includes(`kept in ${dir}/region`)), server.banner.join('\n'));
  const stopped = await server.stop('SIGTERM');
  t.is(stopped.code, 0, stopped.stderr);
  // The same harness sees a broken command line fail: kv-server exits 2.
  const broken = await kvServer(args.map((a) => (a === '--memory' ? '--memroy' : a)));
  t.is(broken.code, 2, broken.stderr);
  t.deepEqual(unknownOptions(['--memroy'], 'ExecStart'), ['ExecStart: kv-server has no option --memroy']);
});

// ---------------------------------------------------------------- container

const DOCKERFILE = read('container/Dockerfile');

test('container: the Dockerfile passes dockerfile-utils\' validator with every rule an error', (t) => {
  t.deepEqual(lintDockerfile(DOCKERFILE), []);
  const broken = lintDockerfile(replace(DOCKERFILE, 'WORKDIR /src', 'WORKDIR src\nCOPPY . .'));
  t.true(broken.some((p) => p.includes('COPPY')), broken.join('\n'));
  t.true(broken.some((p) => p.includes('WORKDIR paths should be absolute')), broken.join('\n'));
});

test('container: the image runs kv-server as a non-root user with IPC_LOCK, with options kv-server has', (t) => {
  t.deepEqual(imagePolicy(DOCKERFILE), []);
  t.true(imagePolicy(replace(DOCKERFILE, 'USER 10001:10001', 'USER root')).some((p) => p.includes('runs as root')));
  t.true(imagePolicy(replace(DOCKERFILE, /\n *&& setcap cap_ipc_lock=ep [^\n]*/, '')).some((p) => p.includes('IPC_LOCK')));
  t.true(imagePolicy(replace(DOCKERFILE, '"--metrics-port"', '"--metric-port"')).some((p) => p.includes('--metric-port')));
});

// ---------------------------------------------------------------- Kubernetes

test('k8s: every manifest, rendered as kubectl apply -k would, passes the schemas, the field check and the cross-references', async (t) => {
  const { problems, objects } = await k8sProblems(join(DEPLOY, 'k8s'));
  t.deepEqual(problems, []);
  // Namespace, 2 Services, 2 StatefulSets, 2 PDBs, a NetworkPolicy, the
  // hugepages variant of the kv-server StatefulSet and the ServiceMonitor.
  t.is(objects, 10);
});

test('k8s: a wrong type, an unknown field, a bad CRD value, a dangling reference and a patch that misses are each caught', async (t) => {
  const cases: Array<[string, string, string | RegExp, string, RegExp]> = [
    ['wrong type', 'base/kv-server.yaml', 'replicas: 3', 'replicas: three', /replicas must be integer/],
    ['unknown field', 'base/kv-server.yaml', '          resources:\n', '          resource:\n', /containers\[0\]\.resource: unknown field/],
    ['CRD schema', 'monitoring/servicemonitor.yaml', 'interval: 15s', 'interval: often', /ServiceMonitor\/rdma-kv: .*interval must match pattern/],
    ['selector', 'base/etcd.yaml', 'minAvailable: 2\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: etcd', 'minAvailable: 2\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: etc', /PodDisruptionBudget\/etcd: its selector matches no pods/],
    ['volume', 'base/kv-server.yaml', '- name: token\n          secret:', '- name: tokens\n          secret:', /mounts volume token, which the pod does not have/],
    ['env', 'base/kv-server.yaml', '--name=$(POD_NAME)', '--name=$(POD_NAM)', /\$\(POD_NAM\) is not in its env/],
    ['kv-server option', 'base/kv-server.yaml', '--region-file=', '--region=', /kv-server has no option --region/],
    ['patch', 'hugepages/region-on-hugepages.yaml', 'path: /spec/volumeClaimTemplates', 'path: /spec/volumeClaimTemplate', /region-on-hugepages\.yaml on base\/kv-server\.yaml: StatefulSet\/rdma-kv: Cannot perform the operation/],
    ['YAML', 'base/namespace.yaml', 'name: rdma-kv', 'name: rdma-kv\n  name: again', /unique/],
  ];
  for (const [what, file, from, to, expected] of cases) {
    const { problems } = await k8sProblems(k8sCopy(join(scratch(t), 'k8s'), file, (text) => replace(text, from, to)));
    t.true(problems.some((p) => expected.test(p)), `${what}: expected ${expected} among:\n${problems.join('\n')}`);
  }
});

// ---------------------------------------------------------------- shell

const SCRIPTS = shellScripts(DEPLOY);

needs('shellcheck')('shell: shellcheck passes every shell script in deploy/', (t) => {
  t.true(SCRIPTS.includes('softroce/setup-rxe.sh') && SCRIPTS.includes('softroce-vm/init'), SCRIPTS.join(' '));
  for (const script of SCRIPTS) t.deepEqual(shellcheck(join(DEPLOY, script)), [], script);
  const broken = join(scratch(t), 'setup-rxe.sh');
  writeFileSync(broken, replace(read('softroce/setup-rxe.sh'), 'rdma link delete "$NAME"', 'rdma link delete $NAME'));
  t.true(shellcheck(broken).some((line) => line.includes('SC2086')), 'an unquoted variable must be reported');
});

test('shell: setup-rxe.sh refuses bad arguments (exit 2) and a missing interface (exit 1) with one line', (t) => {
  const script = join(DEPLOY, 'softroce/setup-rxe.sh');
  const usage = spawnSync('bash', [script, '--bogus'], { encoding: 'utf8' });
  t.is(usage.status, 2);
  t.regex(usage.stderr, /^setup-rxe: unknown argument --bogus \(usage: .*\)\n$/);
  // Refused before it loads or adds anything, whatever this host has.
  const missing = spawnSync('bash', [script, '--netdev', 'rkv-none0'], { encoding: 'utf8' });
  t.is(missing.status, 1);
  t.regex(missing.stderr, /^setup-rxe: (no network interface rkv-none0|needs root|the rdma command is missing)[^\n]*\n$/);
});

// ---------------------------------------------------------------- Grafana

/** Every metric name the code exports: the server's METRICS with prom-client's defaults, and ClientMetrics. */
function exportedMetrics(): { known: Set<string>; server: string[]; client: string[] } {
  const registry = createRegistry(() => undefined);
  const clients = new Registry();
  new ClientMetrics(clients);
  const client = clients.getMetricsAsArray().map((m) => m.name);
  const known = new Set(['up']); // Prometheus's own series for each scrape target
  for (const m of [...registry.getMetricsAsArray(), ...clients.getMetricsAsArray()]) {
    known.add(m.name);
    if (m instanceof Histogram) for (const suffix of ['_bucket', '_sum', '_count']) known.add(`${m.name}${suffix}`);
  }
  return { known, server: METRICS.map((m) => m.name), client };
}

/** Sizes fixed at start: kvctl stats shows them; no panel needs them. */
const NOT_CHARTED = ['rdmakv_index_bytes', 'rdmakv_slots'];

test('grafana: every query parses as PromQL and uses only metrics the code exports; every metric is charted', (t) => {
  const { known, server, client } = exportedMetrics();
  t.true(client.length >= 5, `ClientMetrics registered ${client.join(', ')}`);
  const mustChart = [...server.filter((name) => !NOT_CHARTED.includes(name)), ...client];
  const dashboards = filesUnder(join(DEPLOY, 'grafana')).filter((f) => f.endsWith('.json'));
  t.deepEqual(dashboards, ['rdma-kv.json']);
  t.deepEqual(dashboardProblems(read('grafana/rdma-kv.json'), known, mustChart), []);
});

test('grafana: a misspelt metric, broken PromQL, an undefined variable and an uncharted metric are caught', (t) => {
  const { known } = exportedMetrics();
  const text = read('grafana/rdma-kv.json');
  const check = (edited: string, mustChart: string[] = []) => dashboardProblems(edited, known, mustChart);
  t.true(check(replace(text, '"sum(rdmakv_items{', '"sum(rdmakv_itemz{')).some((p) => p.includes('rdmakv_itemz is not a metric')));
  t.true(check(replace(text, '"sum(rdmakv_items{', '"sum(sum(rdmakv_items{')).some((p) => p.includes('syntax error')));
  t.true(check(replace(text, 'instance=~\\"$instance\\"}', 'instance=~\\"$host\\"}')).some((p) => p.includes('$host is not a dashboard variable')));
  t.true(check(text, ['rdmakv_not_charted_total']).some((p) => p.includes('rdmakv_not_charted_total is on no panel')));
  t.regex(check('{"panels": [').join('\n'), /^not JSON: /);
});
