// The typed face of the client core (native/client-core.ts): a view of its
// scratch memory keeps the core alive, so a Buffer handed out of it can never
// show memory the core has freed.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import test from 'ava';

test('a view of a client core\'s scratch keeps the core and its memory alive; dropping the view frees them', async (t) => {
  const result = await new Promise<Record<string, number>>((resolve, reject) => {
    const child = fork(fileURLToPath(new URL('../helpers/scratch-child.js', import.meta.url)), [], {
      execArgv: ['--expose-gc'],
      env: { ...process.env, RKV_QUIET: '1' },
    });
    child.on('message', (m) => resolve(m as Record<string, number>));
    child.on('exit', (code, signal) => (code !== 0 || signal) && reject(new Error(`child exited with ${signal ?? code}`)));
  });
  t.log(JSON.stringify(result));
  const { withView, afterView, read } = result;
  t.is(read, 0); // read after the GC: the memory is still there
  // The scratch mapping outlived the session while the view was held, and went with the view.
  t.true(withView! > afterView!, 'dropping the view unmapped the scratch memory');
});
