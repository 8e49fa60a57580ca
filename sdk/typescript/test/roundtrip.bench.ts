// The SDK's round trip, for BenchmarkRoundTrip (bench_test.go): lease a
// template and wait for ready, run `true`, delete; N times in one process,
// as a program that leases again and again would. Prints the milliseconds
// of each as one JSON array.
import { Envlease } from "@envlease/sdk";

const [template = "sleeper", count = "100"] = process.argv.slice(2);
const envlease = new Envlease();
const ms: number[] = [];
for (let i = 0; i < Number(count); i++) {
  const start = performance.now();
  {
    await using env = await envlease.create({ template });
    const r = await env.exec(["true"]);
    if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`);
  }
  ms.push(performance.now() - start);
}
console.log(JSON.stringify(ms));
