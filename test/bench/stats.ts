/** Goodness-of-fit helpers for the generator tests (fixed seeds keep them deterministic). */

/** Pearson chi-square statistic; categories with tiny expectations should be merged by the caller. */
export function chiSquare(observed: readonly number[], expected: readonly number[]): number {
  let x2 = 0;
  for (let i = 0; i < observed.length; i++) {
    const e = expected[i]!;
    const d = observed[i]! - e;
    x2 += (d * d) / e;
  }
  return x2;
}

/**
 * Upper critical value of chi-square with `df` degrees of freedom at significance 0.001
 * (Wilson–Hilferty approximation; accurate to a few percent for df >= 3).
 */
export function chiSquareCritical001(df: number): number {
  const z = 3.090232; // standard normal 0.999 quantile
  const a = 2 / (9 * df);
  return df * (1 - a + z * Math.sqrt(a)) ** 3;
}

/** Merges adjacent categories until each expected count is >= minExpected. */
export function mergeSmall(observed: readonly number[], expected: readonly number[], minExpected = 5): { observed: number[]; expected: number[] } {
  const o: number[] = [];
  const e: number[] = [];
  let accO = 0;
  let accE = 0;
  for (let i = 0; i < observed.length; i++) {
    accO += observed[i]!;
    accE += expected[i]!;
    if (accE >= minExpected) {
      o.push(accO);
      e.push(accE);
      accO = 0;
      accE = 0;
    }
  }
  if (accE > 0) {
    if (e.length === 0) {
      o.push(accO);
      e.push(accE);
    } else {
      o[o.length - 1]! += accO;
      e[e.length - 1]! += accE;
    }
  }
  return { observed: o, expected: e };
}

/** Kolmogorov–Smirnov statistic D of a sample against a continuous CDF. */
export function ksStatistic(sample: number[], cdf: (x: number) => number): number {
  const xs = [...sample].sort((a, b) => a - b);
  const n = xs.length;
  let d = 0;
  xs.forEach((x, i) => {
    const f = cdf(x);
    d = Math.max(d, (i + 1) / n - f, f - i / n);
  });
  return d;
}

/** KS critical value at significance 0.001 for large n. */
export function ksCritical001(n: number): number {
  return 1.949 / Math.sqrt(n);
}

/** Asserts a sample of size n fits expected probabilities: returns [statistic, critical]. */
export function chiSquareFit(counts: readonly number[], probabilities: readonly number[], n: number): [number, number] {
  const merged = mergeSmall(counts, probabilities.map((p) => p * n));
  const df = merged.observed.length - 1;
  return [chiSquare(merged.observed, merged.expected), chiSquareCritical001(df)];
}
