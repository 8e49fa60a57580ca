import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "./openapi.js";
import { errorFrom } from "./errors.js";
import { Environment, waitReady } from "./environment.js";
import { Artifacts } from "./artifacts.js";
import type { WebSocketConstructor } from "./socket.js";

export type EnvironmentRecord = components["schemas"]["Environment"];
export type LeaseRequest = components["schemas"]["LeaseRequest"];
export type Template = components["schemas"]["Template"];

export interface EnvleaseOptions {
  /** The API's base URL; default ENVLEASE_URL. */
  url?: string;
  /** A CLI token or an organization API key; default ENVLEASE_TOKEN. */
  token?: string;
  /** The fetch to call the API with (default: the global fetch). */
  fetch?: typeof fetch;
  /** The WebSocket for the node's endpoint (default: the global one, else the ws package). */
  WebSocket?: WebSocketConstructor;
}

export interface CreateOptions extends LeaseRequest {
  /** Wait for `ready` (the default), or answer at once with the leased environment. */
  wait?: boolean;
  /** The longest create waits for ready, in milliseconds (default 5 minutes). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

function fromEnv(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env?.[name] || undefined;
}

// Reads and deletes are sent again when the service is briefly unavailable
// (502, 503, or no answer), after its Retry-After or a doubling pause, as
// the Go client does; anything else is answered once (a lease or an exec
// ticket sent twice would be two), unless the environment is waking.
const retried = new Set(["GET", "HEAD", "DELETE"]);
const attempts = 4;

// A paused environment wakes on use: the service answers 503 with code
// "waking" (and issues nothing) until it is ready again, so any request so
// answered is asked again, for at most wakeMs (the Go client's MaxWake).
const wakeMs = 60_000;

async function isWaking(res: Response): Promise<boolean> {
  if (res.status !== 503) return false;
  try {
    const body = (await res.clone().json()) as { code?: string };
    return body?.code === "waking";
  } catch {
    return false;
  }
}

async function retrying(f: typeof fetch, req: Request): Promise<Response> {
  if (!retried.has(req.method)) {
    const until = Date.now() + wakeMs;
    for (;;) {
      const res = await f(req.clone());
      if (!(await isWaking(res)) || Date.now() >= until || req.signal.aborted) return res;
      const after = Number(res.headers.get("Retry-After"));
      await res.body?.cancel();
      await new Promise((r) => setTimeout(r, Number.isFinite(after) && after > 0 ? Math.min(after, 10) * 1000 : 1000));
    }
  }
  for (let n = 1; ; n++) {
    let res: Response | undefined;
    try {
      res = await f(req.clone());
    } catch (e) {
      if (n >= attempts || req.signal.aborted) throw e;
    }
    if (res && (n >= attempts || (res.status !== 502 && res.status !== 503))) return res;
    const after = Number(res?.headers.get("Retry-After"));
    await res?.body?.cancel();
    const pause = Number.isFinite(after) && after > 0 ? Math.min(after, 10) * 1000 : 200 * 2 ** (n - 1);
    await new Promise((r) => setTimeout(r, pause));
  }
}

/** @internal A result of openapi-fetch: data, or the error's body and the response. */
export async function ok<T>(p: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data, error, response } = await p;
  if (!response.ok) throw await errorFrom(response, error ?? undefined);
  return data as T;
}

/**
 * The client of one envlease service with one token.
 *
 *     const envlease = new Envlease(); // ENVLEASE_URL, ENVLEASE_TOKEN
 *     await using env = await envlease.create({ template: "shell" });
 *     const { stdout } = await env.exec("echo hello");
 */
export class Envlease {
  /** The typed client of the whole API, for what this surface does not cover. */
  readonly api: Client<paths>;
  /** Artifacts: sealed files with their links. */
  readonly artifacts: Artifacts;
  /** @internal */
  readonly webSocket?: WebSocketConstructor;
  /** @internal */
  readonly fetch: typeof fetch;
  /** @internal */
  readonly baseUrl: string;
  /** @internal */
  readonly token: string;

  constructor(o: EnvleaseOptions = {}) {
    const url = o.url ?? fromEnv("ENVLEASE_URL");
    const token = o.token ?? fromEnv("ENVLEASE_TOKEN");
    if (!url) throw new Error("no API URL: pass {url} or set ENVLEASE_URL");
    if (!token) throw new Error("no token: pass {token} or set ENVLEASE_TOKEN");
    this.fetch = o.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.baseUrl = url.replace(/\/+$/, "");
    this.token = token;
    this.api = createClient<paths>({
      baseUrl: this.baseUrl,
      headers: { Authorization: `Bearer ${token}` },
      fetch: (req: Request) => retrying(this.fetch, req),
    });
    this.webSocket = o.WebSocket;
    this.artifacts = new Artifacts(this);
  }

  /**
   * create leases an environment from a template and, unless told not to,
   * waits until it is ready: it throws EnvironmentFailedError if it ended
   * first. `await using` deletes it when the block ends.
   */
  async create(o: CreateOptions): Promise<Environment> {
    const { wait = true, timeoutMs = 5 * 60_000, signal, ...lease } = o;
    const leased = await ok(this.api.POST("/v1/environments", { body: lease, signal }));
    const env = new Environment(this, leased.environment);
    if (!wait) return env;
    try {
      await waitReady(env, timeoutMs, signal);
    } catch (e) {
      // Nobody holds it yet: a lease that did not become ready is released.
      await env.delete().catch(() => {});
      throw e;
    }
    return env;
  }

  /** get reads an environment by id; its methods then act on it. */
  async get(id: string): Promise<Environment> {
    const rec = await ok(this.api.GET("/v1/environments/{id}", { params: { path: { id } } }));
    return new Environment(this, rec);
  }

  /** list reads the caller's live environments (or those in one state). */
  async list(state?: "live" | "pending" | "starting" | "ready" | "stopping" | "stopped" | "failed"): Promise<Environment[]> {
    const out: Environment[] = [];
    let cursor: string | undefined;
    do {
      const page = await ok(this.api.GET("/v1/environments", { params: { query: { state, cursor, limit: 200 } } }));
      for (const e of page.environments) out.push(new Environment(this, e));
      cursor = page.next;
    } while (cursor);
    return out;
  }

  /** templates are what the caller may lease. */
  async templates(): Promise<Template[]> {
    const t = await ok(this.api.GET("/v1/templates"));
    return t.templates;
  }
}
