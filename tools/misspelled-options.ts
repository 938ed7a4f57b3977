// Misspelled options on the tools' command lines (kvctl, kv-bench): a yargs
// middleware that answers `--jsn` with "unknown option --jsn: did you mean
// --json?" (a UsageError, exit code 2). It runs before yargs' validation, so
// it sees the options of the command being run; an unknown option with no
// close match is left to .strict() ("Unknown argument: bogus"). The matching
// itself is protocol/operator-input.ts, shared with kv-server.
import { UsageError, closestMatch, unknownOptionNames } from '../protocol/operator-input.js';

/** What the middleware reads of the yargs instance that runs it (yargs passes it second; @types/yargs leaves it out). */
interface RunningParser {
  getOptions(): { key: Record<string, unknown>; alias: Record<string, string[]> };
  getGroups(): Record<string, string[]>;
}

/** How the option was typed: its dashes, and 'no-' if it was negated (--no-jsn). */
function typedAs(argv: readonly string[], name: string): { dashes: string; no: string } {
  for (const arg of argv) {
    if (arg === '--') break;
    const match = /^(-{1,2})(no-)?([^=]+)/.exec(arg);
    if (match && match[3] === name) return { dashes: match[1]!, no: match[2] ?? '' };
  }
  return { dashes: '--', no: '' };
}

/**
 * The middleware, for `.middleware(rejectMisspelledOptions(argv), true)`.
 * The suggestion keeps the dashes the option was typed with (kv-bench takes
 * YCSB's -threads as well as --threads). Only options of two letters or more
 * are suggested: one letter is too little to guess from.
 */
export function rejectMisspelledOptions(argv: readonly string[]) {
  return (args: Record<string, unknown>, running?: unknown): void => {
    const parser = running as RunningParser;
    const { key, alias } = parser.getOptions();
    const known = [...Object.keys(key), ...Object.keys(alias), ...Object.values(alias).flat()];
    const positionals = new Set(parser.getGroups()['Positionals:'] ?? []);
    const options = Object.keys(key).filter((name) => !positionals.has(name) && name.length > 1);
    for (const name of unknownOptionNames(Object.keys(args), known)) {
      const meant = closestMatch(name, options);
      if (meant === undefined) continue;
      const { dashes, no } = typedAs(argv, name);
      throw new UsageError(`unknown option ${dashes}${no}${name}: did you mean ${dashes}${no}${meant}?`);
    }
  };
}
