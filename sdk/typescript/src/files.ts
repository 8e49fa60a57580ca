// Files in a running environment (docs/files.md): a ticket from the API
// (POST /v1/environments/{id}/files, read or write), then plain HTTP to the
// node's files endpoint with it. Every change is made by the node as the
// environment's user, within its root and the paths it may write; the
// bytes stream both ways and never pass through the API.

import { EnvleaseError, errorFrom, type ErrorCode } from "./errors.js";
import type { Environment } from "./environment.js";

/** One entry of an environment's files. */
export interface FileInfo {
  name: string;
  /** The entry's absolute path in the environment. */
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  /** Permission bits in octal, `0644`. */
  mode: string;
  modified: string;
  /** Where a symbolic link points. */
  target?: string;
}

/** A folder's entries, sorted by name; `truncated` when there were more than the node lists. */
export interface FileList {
  path: string;
  entries: FileInfo[];
  truncated: boolean;
}

/** One line of a watch. */
export interface FileChange {
  op: "watching" | "create" | "write" | "remove" | "rename" | "chmod" | "overflow" | "end";
  path?: string;
  type?: "file" | "dir";
  time?: string;
  /** Why a watch ended (`op` end). */
  reason?: string;
}

/**
 * An error of the node's files endpoint: the API's code and status, and
 * `reason`, what exactly was refused (`outside_root`, `special_path`,
 * `read_only`, `permission_denied`, `not_found`, `is_dir`, `not_dir`, …).
 */
export class FileError extends EnvleaseError {
  override readonly name = "FileError";
  constructor(
    message: string,
    code: ErrorCode,
    status: number,
    readonly reason: string,
  ) {
    super(message, code, status);
  }
}

interface Ticket {
  url: string;
  ticket: string;
  expires: string;
  write: boolean;
}

// A ticket lives 5 minutes; one about to expire is not used for a new request.
const ticketMargin = 30_000;

type Body = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;

// staleTicket tells whether e says the ticket kept is no longer good: the
// node refused it, holds the environment no longer, answered for no
// environment at all (401, 403, 404 or 410 without a files reason), or could
// not be reached. A refusal of the request itself (a missing file) is not.
function staleTicket(e: unknown): boolean {
  if (!(e instanceof FileError)) return !(e instanceof EnvleaseError); // fetch failed: the node is not reachable
  if (e.reason === "ticket" || e.reason === "environment_gone") return true;
  if (e.reason === "internal") return [401, 403, 404, 410].includes(e.status);
  return e.status === 401 || e.status === 410;
}

/** The files of one environment: `env.files`. */
export class Files {
  private tickets: [Ticket | undefined, Ticket | undefined] = [undefined, undefined];

  /** @internal */
  constructor(private readonly env: Environment) {}

  private async ticket(write: boolean): Promise<Ticket> {
    // A write ticket also reads; one write ticket is one event, whatever it writes.
    for (let i = write ? 1 : 0; i < 2; i++) {
      const t = this.tickets[i];
      if (t && Date.parse(t.expires) - Date.now() > ticketMargin) return t;
    }
    const c = this.env.client;
    // Not in the generated paths until the files route is in the API
    // description this package was generated from; the same call either way.
    const res = await c.fetch(`${c.baseUrl}/v1/environments/${encodeURIComponent(this.env.id)}/files`, {
      method: "POST",
      headers: { Authorization: `Bearer ${c.token}`, "Content-Type": "application/json" },
      body: JSON.stringify({ write }),
    });
    if (!res.ok) throw await errorFrom(res);
    const t = (await res.json()) as Ticket;
    this.tickets[write ? 1 : 0] = t;
    return t;
  }

  // drop forgets ticket t, if it is still kept, so the next request asks for a new one.
  private drop(t: Ticket): void {
    for (let i = 0; i < 2; i++) if (this.tickets[i]?.ticket === t.ticket) this.tickets[i] = undefined;
  }

  // A ticket the node refuses, or a node that no longer holds the environment
  // (it paused and woke on another) or cannot be reached, drops the ticket
  // kept; the request is sent once more with a fresh one, which names the
  // environment's node now, unless its body is a stream (read already).
  private async request(write: boolean, method: string, route: string, query: Record<string, string | undefined>, o: { body?: Body; signal?: AbortSignal } = {}): Promise<Response> {
    const again = !(o.body instanceof ReadableStream);
    for (let attempt = 0; ; attempt++) {
      const t = await this.ticket(write);
      try {
        return await this.send(t, method, route, query, o);
      } catch (e) {
        if (o.signal?.aborted || !staleTicket(e)) throw e;
        this.drop(t);
        if (attempt > 0 || !again) throw e;
      }
    }
  }

  private async send(t: Ticket, method: string, route: string, query: Record<string, string | undefined>, o: { body?: Body; signal?: AbortSignal }): Promise<Response> {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined) q.set(k, v);
    const init: RequestInit & { duplex?: "half" } = { method, headers: { Authorization: `Bearer ${t.ticket}` }, signal: o.signal };
    if (o.body !== undefined) {
      init.body = o.body as BodyInit;
      (init.headers as Record<string, string>)["Content-Type"] = "application/octet-stream";
      // A stream goes as it is read, which fetch calls half duplex.
      if (o.body instanceof ReadableStream) init.duplex = "half";
    }
    const res = await this.env.client.fetch(`${t.url}${route}?${q}`, init);
    if (!res.ok) {
      let b: { error?: string; code?: string; reason?: string } = {};
      try {
        b = (await res.json()) as typeof b;
      } catch {
        // Not the endpoint's JSON: said below.
      }
      throw new FileError(b.error || `the node's files endpoint answered ${res.status}`, (b.code || "unavailable") as ErrorCode, res.status, b.reason || "internal");
    }
    return res;
  }

  /** read returns a file's bytes. */
  async read(path: string, o: { signal?: AbortSignal } = {}): Promise<Uint8Array> {
    const res = await this.request(false, "GET", "/read", { path }, o);
    return new Uint8Array(await res.arrayBuffer());
  }

  /** readText returns a file's bytes as UTF-8 text. */
  async readText(path: string, o: { signal?: AbortSignal } = {}): Promise<string> {
    const res = await this.request(false, "GET", "/read", { path }, o);
    return res.text();
  }

  /** stream returns a file's bytes as they come, for large files. */
  async stream(path: string, o: { signal?: AbortSignal } = {}): Promise<ReadableStream<Uint8Array>> {
    const res = await this.request(false, "GET", "/read", { path }, o);
    return res.body ?? new ReadableStream({ start: (c) => c.close() });
  }

  /**
   * write replaces a file with data, atomically (readers inside see the old
   * file or the new one); `mode` (octal, `0755`) defaults to the replaced
   * file's, else 0644, and `parents` makes missing folders. A
   * ReadableStream is sent as it is read.
   */
  async write(path: string, data: Body, o: { mode?: string; parents?: boolean; signal?: AbortSignal } = {}): Promise<FileInfo> {
    const res = await this.request(true, "PUT", "/write", { path, mode: o.mode, parents: o.parents ? "true" : undefined }, { body: data, signal: o.signal });
    return (await res.json()) as FileInfo;
  }

  /** stat describes one entry (a link itself, not what it points to). */
  async stat(path: string): Promise<FileInfo> {
    return (await (await this.request(false, "GET", "/stat", { path })).json()) as FileInfo;
  }

  /** exists says whether there is an entry at path. */
  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (e) {
      if (e instanceof FileError && e.status === 404 && e.reason === "not_found") return false;
      throw e;
    }
  }

  /** list reads a folder's entries. */
  async list(path: string): Promise<FileList> {
    return (await (await this.request(false, "GET", "/list", { path })).json()) as FileList;
  }

  /** mkdir makes a folder; with parents, missing parents too, and an existing folder is no error. */
  async mkdir(path: string, o: { mode?: string; parents?: boolean } = {}): Promise<FileInfo> {
    const res = await this.request(true, "POST", "/mkdir", { path, mode: o.mode, parents: o.parents ? "true" : undefined });
    return (await res.json()) as FileInfo;
  }

  /** remove removes a file, a link or an empty folder; with recursive, a folder and all it holds. */
  async remove(path: string, o: { recursive?: boolean } = {}): Promise<void> {
    const res = await this.request(true, "POST", "/remove", { path, recursive: o.recursive ? "true" : undefined });
    await res.body?.cancel();
  }

  /**
   * watch yields a folder's changes as they happen: first `watching` once
   * the watch is in place, then one change a line, `overflow` when some
   * were lost (list the folder again), and `end` when the folder or the
   * environment ends. Breaking out of the loop, or the signal, ends it.
   */
  async *watch(path: string, o: { recursive?: boolean; signal?: AbortSignal } = {}): AsyncGenerator<FileChange> {
    const ctl = new AbortController();
    const onAbort = () => ctl.abort();
    o.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const res = await this.request(false, "GET", "/watch", { path, recursive: o.recursive ? "true" : undefined }, { signal: ctl.signal });
      const r = res.body!.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await r.read();
        } catch (e) {
          if (ctl.signal.aborted) return;
          throw e;
        }
        if (chunk.done) return;
        buf += dec.decode(chunk.value, { stream: true });
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (!line) continue;
          const change = JSON.parse(line) as FileChange;
          yield change;
          if (change.op === "end") return;
        }
      }
    } finally {
      o.signal?.removeEventListener("abort", onAbort);
      ctl.abort();
    }
  }
}
