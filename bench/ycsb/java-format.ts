/**
 * Java's ways of printing that YCSB's output depends on: Double.toString (exporters),
 * DecimalFormat("#.##") (status lines), SimpleDateFormat("yyyy-MM-dd HH:mm:ss:SSS"), and the
 * iteration order of a HashMap / ConcurrentHashMap (the order in which YCSB prints measurements
 * and return codes, and BasicDB prints fields).
 */
import { javaStringHashCode } from './hash.js';

/** Java's Double.toString(d) (shortest digits, JDK 19+). */
export function javaDoubleToString(d: number): string {
  if (Number.isNaN(d)) return 'NaN';
  if (d === Infinity) return 'Infinity';
  if (d === -Infinity) return '-Infinity';
  if (d === 0) return Object.is(d, -0) ? '-0.0' : '0.0';
  const sign = d < 0 ? '-' : '';
  const abs = Math.abs(d);
  const [mantissa, expText] = abs.toExponential().split('e') as [string, string];
  const digits = mantissa.replace('.', '');
  const exp = Number(expText);
  if (abs >= 1e-3 && abs < 1e7) {
    if (exp >= 0) {
      const intPart = digits.slice(0, exp + 1).padEnd(exp + 1, '0');
      const frac = digits.slice(exp + 1);
      return `${sign}${intPart}.${frac === '' ? '0' : frac}`;
    }
    return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
  }
  const frac = digits.slice(1);
  return `${sign}${digits[0]}.${frac === '' ? '0' : frac}E${exp}`;
}

/** Java's long/int printing: plain integer digits. */
export function javaLongToString(n: number): string {
  return Number.isInteger(n) ? String(n) : String(Math.trunc(n));
}

/** new DecimalFormat("#.##").format(d): at most two decimals, HALF_EVEN, no trailing zeros. */
export function decimalFormat2(d: number): string {
  if (!Number.isFinite(d)) return d > 0 ? '∞' : d < 0 ? '-∞' : 'NaN';
  const scaled = d * 100;
  let rounded: number;
  const floor = Math.floor(scaled);
  if (scaled - floor === 0.5 && Number.isInteger(d * 1000)) {
    rounded = floor % 2 === 0 ? floor : floor + 1; // exact tie: round half to even
  } else {
    rounded = Math.round(Number(d.toFixed(2)) * 100);
  }
  const negative = rounded < 0;
  const abs = Math.abs(rounded);
  const intPart = Math.floor(abs / 100);
  const frac = String(abs % 100).padStart(2, '0').replace(/0+$/, '');
  const text = frac === '' ? String(intPart) : `${intPart}.${frac}`;
  return negative && text !== '0' ? `-${text}` : text;
}

/** SimpleDateFormat("yyyy-MM-dd HH:mm:ss:SSS") in local time. */
export function formatStatusDate(date: Date): string {
  const p = (n: number, w = 2): string => String(n).padStart(w, '0');
  return (
    `${date.getFullYear()}-${p(date.getMonth() + 1)}-${p(date.getDate())} ` +
    `${p(date.getHours())}:${p(date.getMinutes())}:${p(date.getSeconds())}:${p(date.getMilliseconds(), 3)}`
  );
}

/**
 * Iteration order of a java.util.HashMap (or ConcurrentHashMap) after inserting items with the
 * given 32-bit hash codes in order: by bucket index at the final table size, then insertion order.
 * `resizeAt` is the size that doubles the 16-bucket table: 13 for HashMap, 12 for
 * ConcurrentHashMap (which resizes when the count reaches 0.75 n).
 */
export function javaHashOrder<T>(items: readonly T[], hashCode: (item: T) => number, resizeAt = 13): T[] {
  let capacity = 16;
  let threshold = resizeAt;
  while (items.length >= threshold) {
    capacity *= 2;
    threshold *= 2;
  }
  const mask = capacity - 1;
  return items
    .map((item, order) => {
      const h = hashCode(item);
      return { item, order, bucket: ((h ^ (h >>> 16)) & 0x7fffffff) & mask };
    })
    .sort((a, b) => a.bucket - b.bucket || a.order - b.order)
    .map((e) => e.item);
}

export function javaHashOrderOfStrings(names: readonly string[], resizeAt = 13): string[] {
  return javaHashOrder(names, javaStringHashCode, resizeAt);
}
