// A process that exits without closing its providers exits cleanly: at exit
// Node finalizes the providers' thread-safe functions before their wrappers,
// in an order nobody controls, and a wrapper must not touch one that is gone
// (with two providers that aborted the process with SIGABRT, exit code 134).
import { spawnSync } from 'node:child_process';

import test from 'ava';

const addon = new URL('../../native/index.js', import.meta.url).href;

const cases: Array<[string, string]> = [
  ['two providers', `const ps = [new Provider('shm'), new Provider('shm')];`],
  ['three providers with watched CQs, process.exit()', `const ps = [new Provider('shm'), new Provider('shm'), new Provider('shm')];
     ps.forEach((p) => p.createCq(16).watch(() => {})); setTimeout(() => process.exit(0), 50);`],
  ['a provider with a listener and a connection to itself', `const p = new Provider('shm'), q = new Provider('shm');
     const url = 'shm://' + (await import('node:os')).tmpdir() + '/rkv-exit-' + process.pid + '.sock';
     p.listen(url); p.on('connectRequest', (r) => r.accept({ cq: p.createCq(16) }));
     await q.connect(url, { cq: q.createCq(16) }); setTimeout(() => process.exit(0), 50);`],
  // A watch's handles are on the worker's own event loop: its teardown must close them (an async cleanup hook).
  ['a worker that exits with a watched (moderated) CQ', `const { Worker } = await import('node:worker_threads');
     const w = new Worker("import('${addon}').then(({ Provider }) => { const p = new Provider('shm'); p.createCq(16).watch(() => 0, 500); p.createCq(16).watch(() => {}); setTimeout(() => process.exit(0), 50); })", { eval: true });
     await new Promise((resolve) => w.on('exit', resolve));`],
  ['a worker terminated with a watched CQ', `const { Worker } = await import('node:worker_threads');
     const w = new Worker("Promise.all([import('${addon}'), import('node:worker_threads')]).then(([{ Provider }, { parentPort }]) => { new Provider('shm').createCq(16).watch(() => 0, 500); parentPort.postMessage('watching'); })", { eval: true });
     await new Promise((resolve) => w.once('message', resolve)); await w.terminate();`],
  // Termination surfaces in the callback's caller as a pending exception whose value is null: it is not an uncaught
  // exception (before: Napi::Error of it aborted the whole process, "FATAL ERROR: Error::Error napi_define_properties").
  ['a worker terminated while inside a watch callback', `const { Worker } = await import('node:worker_threads');
     const pair = '${new URL('../helpers/pair.js', import.meta.url).href}';
     const w = new Worker("const [{ Opcode }, { connectPair }, { parentPort }] = await Promise.all([import('${addon}'), import('" + pair + "'), import('node:worker_threads')]);" +
       "const p = await connectPair('shm', { serverRecvs: 8, recvBytes: 64 });" +
       "p.serverCq.watch(() => { parentPort.postMessage('in callback'); for (;;); }, 500); p.serverCq.arm();" +
       "p.clientConn.postSend([{ wrId: 1, opcode: Opcode.SEND, flags: 0, local: p.scratch, length: 8 }]);", { eval: true, type: 'module' });
     w.on('error', (error) => console.log('worker error: ' + error));
     await new Promise((resolve) => w.once('message', resolve)); await w.terminate();`],
];

for (const [name, body] of cases) {
  test(`shm: ${name}, never closed: the process exits with 0`, (t) => {
    const script = `import { Provider } from '${addon}';\n${body}\nconsole.log('done');`;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', env: { ...process.env, RKV_QUIET: '1' }, timeout: 100_000 });
    t.is(run.stdout.trim(), 'done', run.stderr);
    t.is(run.signal, null, `killed by ${run.signal}`);
    t.is(run.status, 0, run.stderr);
  });
}
