// A seeded xorshift32 for tests: the same seed, the same sequence, in any
// process (children get the seed on their command line). Not for anything
// that needs good randomness.
export function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 4294967296;
  };
}
