// Go's duration strings ("30m", "1h30m", "1.5s"), as the API writes an
// environment's timeouts.

const units: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** milliseconds of a Go duration string; NaN when it is not one. */
export function milliseconds(d: string): number {
  const re = /([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)/gy;
  let total = 0;
  let m: RegExpExecArray | null;
  let seen = 0;
  while ((m = re.exec(d)) !== null) {
    total += Number(m[1]) * (units[m[2]!] ?? NaN);
    seen = re.lastIndex;
  }
  return seen === d.length && d.length > 0 ? total : d === "0" ? 0 : NaN;
}
