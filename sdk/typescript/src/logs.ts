// An environment's log: live from its node with a ticket the API issued,
// or, once it ended, from the artifact that keeps it (docs/environments.md).

import { ok } from "./client.js";
import type { Environment } from "./environment.js";

export interface LogOptions {
  /** Go on with what the environment writes until it ends. */
  follow?: boolean;
  /** Only what was written this long ago and since (a duration, `5m`). */
  since?: string;
  signal?: AbortSignal;
}

async function* text(body: ReadableStream<Uint8Array>, signal?: AbortSignal): AsyncGenerator<string> {
  const r = body.getReader();
  const dec = new TextDecoder();
  const cancel = () => void r.cancel().catch(() => {});
  signal?.addEventListener("abort", cancel, { once: true });
  try {
    for (;;) {
      const { value, done } = await r.read();
      if (done) break;
      const s = dec.decode(value, { stream: true });
      if (s) yield s;
    }
    const rest = dec.decode();
    if (rest) yield rest;
  } finally {
    signal?.removeEventListener("abort", cancel);
    r.releaseLock();
  }
}

/** @internal */
export async function* followLogs(env: Environment, o: LogOptions): AsyncGenerator<string> {
  const f = env.client.fetch;
  for (let tries = 0; ; tries++) {
    const l = await ok(env.client.api.GET("/v1/environments/{id}/logs", { params: { path: { id: env.id } }, signal: o.signal }));
    if (l.kept) {
      if (!l.kept.url) throw new Error(`the log is kept as artifact ${l.kept.artifact}; download it with its link`);
      const res = await f(l.kept.url, { signal: o.signal });
      if (!res.ok || !res.body) throw new Error(`kept log ${l.kept.artifact}: ${res.status}`);
      yield* text(res.body, o.signal);
      return;
    }
    if (!l.live) throw new Error(`environment ${env.id}: the API named no log`);
    const q = new URLSearchParams({ env: env.id });
    if (o.since) q.set("since", o.since);
    if (o.follow) q.set("follow", "true");
    const res = await f(`${l.live.url}?${q}`, { headers: { Authorization: `Bearer ${l.live.ticket}` }, signal: o.signal });
    // 404: the node no longer serves it (the environment just ended): read the kept one.
    if (res.status === 404 && tries < 3) {
      await res.body?.cancel();
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    if (!res.ok || !res.body) throw new Error(`live log: ${res.status} ${await res.text()}`);
    try {
      yield* text(res.body, o.signal);
    } catch (e) {
      if (o.signal?.aborted) return;
      throw e;
    }
    return;
  }
}
