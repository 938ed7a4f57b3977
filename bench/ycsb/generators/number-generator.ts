/** YCSB's NumberGenerator: a stream of numbers with a remembered last value. */
export interface NumberGenerator {
  nextValue(): number;
  lastValue(): number;
  mean(): number;
}

/** Java's (int) cast of a double / Number.intValue(): truncate, saturate, NaN -> 0. */
export function toJavaInt(value: number): number {
  if (Number.isNaN(value)) return 0;
  if (value >= 2147483647) return 2147483647;
  if (value <= -2147483648) return -2147483648;
  return Math.trunc(value);
}

/** Java's long intValue(): keep the low 32 bits, signed. */
export function longIntValue(value: number): number {
  if (value >= -2147483648 && value <= 2147483647) return value;
  return Number(BigInt.asIntN(32, BigInt(Math.trunc(value))));
}
