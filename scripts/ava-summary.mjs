// Reads the counts out of what ava's default reporter printed, for npm test's
// summary (scripts/test-tiers.mjs). ava closes a run with lines such as
// "3 tests passed", "1 test failed", "1 hook failed", "2 tests skipped",
// "1 test todo", "1 known failure", "2 uncaught exceptions", "1 test remained
// pending after a timeout", but prints "N tests passed" only when no test and
// no hook failed: then the passed tests are counted from their own lines
// ("✔ title", or "√ title" where the terminal is TERM=linux, as in the QEMU
// guest). A test file that crashed (uncaught exception, unhandled rejection,
// process.exit) has one "✘ file exited ..." line and no count of its own, and
// so has one that timed out after its tests ("Failed to exit when running file").
// Fixtures: test/scripts/ava-output/, from real ava runs.

// Colours, when FORCE_COLOR makes ava print them through a pipe.
const ANSI = /\x1b\[[0-9;]*m/g;

/** Sum of the numbers the pattern's first group captures. */
function total(text, pattern) {
  return [...text.matchAll(pattern)].reduce((sum, match) => sum + Number(match[1]), 0);
}

/**
 * @param {string} output what ava (and the test files, on stderr) printed
 * @returns {{ passed: number, failed: number, skipped: number, todo: number, knownFailures: number, skipReasons: string[] }}
 *   failed: failed tests and hooks, tests a timeout left pending, and test
 *   files that crashed, did not exit, or declared no test. skipReasons: the distinct
 *   "skipped: WHY" lines test files print (test/helpers/tools.ts), in order.
 */
export function avaCounts(output) {
  const text = output.replace(ANSI, '').replace(/\r/g, '');
  const passed = /^\s*\d+ tests? passed/m.test(text)
    ? total(text, /^\s*(\d+) tests? passed/gm)
    : (text.match(/^\s*[✔√] (?!\[expected fail\])/gm) ?? []).length;
  const failed =
    total(text, /^\s*(\d+) tests? failed/gm) +
    total(text, /^\s*(\d+) hooks? failed/gm) +
    total(text, /^\s*(\d+) tests? remained pending/gm) +
    (text.match(/^\s*(?:[✘×] .+ exited (?:due to|with a non-zero exit code)|[✘×] No tests found in |Failed to exit when running )/gm) ?? []).length;
  return {
    passed,
    failed,
    skipped: total(text, /^\s*(\d+) tests? skipped/gm),
    todo: total(text, /^\s*(\d+) tests? todo/gm),
    knownFailures: total(text, /^\s*(\d+) known failures?/gm),
    skipReasons: [...new Set([...text.matchAll(/^skipped: (.+)$/gm)].map((match) => match[1]))],
  };
}

/**
 * The lines ava marks as failures ("✘ [fail]: file › title message", "✘ a.test.js
 * exited ...", "× ..." under TERM=linux), each once and in order, so that npm
 * test's summary names what failed at the end of a long log.
 * @param {string} output
 * @returns {string[]}
 */
export function avaFailures(output) {
  const text = output.replace(ANSI, '').replace(/\r/g, '');
  return [...new Set([...text.matchAll(/^\s*[✘×] (.+)$/gm)].map((match) => match[1].trim()))];
}

/**
 * Relays a child's output `stream` to `sink` as it comes and collects it as text. Decoded as one
 * stream (setEncoding), not chunk by chunk: the guest's serial console delivers output a few
 * bytes at a time, and a "✔" split between two chunks turned into two replacement characters,
 * so a failing tier's passed tests (counted from their lines) were undercounted.
 * @param {import('node:stream').Readable} stream
 * @param {{ write(text: string): unknown }} sink
 * @returns {() => string} the text so far
 */
export function relayText(stream, sink) {
  let text = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk) => {
    text += chunk;
    sink.write(chunk);
  });
  return () => text;
}
