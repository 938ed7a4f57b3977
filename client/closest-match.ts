// "Did you mean": the known name closest to a misspelled one. Kept small and
// here until protocol/operator-input.ts has a shared one.

/** Edits (insert, delete, substitute) between two strings; case counts as one edit per letter. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}

/**
 * The candidate `name` most likely meant: equal ignoring case, else the fewest
 * edits, at most a third of the name's length (and at least 2 allowed).
 * Undefined when none is that close.
 */
export function closestMatch(name: string, candidates: readonly string[]): string | undefined {
  const lower = name.toLowerCase();
  const sameLetters = candidates.find((c) => c.toLowerCase() === lower);
  if (sameLetters !== undefined) return sameLetters;
  if (name.length > 64) return undefined; // not a misspelling, and the table would be large
  let best: string | undefined;
  let bestDistance = Math.max(2, Math.floor(name.length / 3)) + 1;
  for (const candidate of candidates) {
    const distance = editDistance(lower, candidate.toLowerCase());
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}
