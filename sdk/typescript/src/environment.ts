import type { components } from "./openapi.js";
import type { Envlease, EnvironmentRecord, CreateOptions } from "./client.js";
import { ok } from "./client.js";
import { EnvironmentFailedError, EnvleaseError } from "./errors.js";
import { exec, spawn, type ExecOptions, type ExecResult, type ExecTarget, type Process, type SpawnOptions } from "./exec.js";
import { followLogs, type LogOptions } from "./logs.js";
import { milliseconds } from "./duration.js";
import { Files } from "./files.js";

export type Preview = components["schemas"]["Preview"];
export type Checkpoint = components["schemas"]["Checkpoint"];
export type Artifact = components["schemas"]["Artifact"];

export interface PreviewOptions {
  /** The export to open (may be left out when the template has one). */
  export?: string;
  /** How long the link opens: `1m` up to the service's maximum; default 1h. */
  expires?: string;
}

export interface CheckpointOptions {
  /** The checkpoint artifact's name. */
  name?: string;
  /** The artifact's expiry: a duration such as `72h`, or an RFC 3339 time. */
  expires?: string;
}

export interface ForkOptions extends CheckpointOptions, Omit<CreateOptions, "template" | "snapshot" | "name"> {
  /** The new environment's name. */
  envName?: string;
}

const terminal = new Set(["failed", "stopping", "stopped"]);

/** @internal */
export async function waitReady(env: Environment, timeoutMs: number, signal?: AbortSignal): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (env.info.state !== "ready") {
    if (terminal.has(env.info.state)) throw new EnvironmentFailedError(env.info);
    signal?.throwIfAborted();
    const left = deadline - Date.now();
    if (left <= 0) throw new Error(`environment ${env.id} is still ${env.info.state} after ${timeoutMs} ms`);
    // The API holds the answer until the environment is ready (at most 8s).
    const wait = Math.max(1, Math.min(left, 8000));
    env.info = await ok(
      env.client.api.GET("/v1/environments/{id}", {
        params: { path: { id: env.id }, query: { wait: "ready", timeout: `${wait}ms` } },
        signal,
      }),
    );
  }
}

/**
 * A leased environment. Its methods act on it through the API and the
 * node that runs it; `await using` deletes it when the block ends.
 */
export class Environment implements AsyncDisposable {
  /** @internal */
  readonly client: Envlease;
  /** The record as last read (create, get, refresh, touch, delete update it). */
  info: EnvironmentRecord;
  /** Its files: read, write, list, stat, remove, mkdir, watch (docs/files.md). */
  readonly files: Files;

  /** @internal */
  constructor(client: Envlease, info: EnvironmentRecord) {
    this.client = client;
    this.info = info;
    this.files = new Files(this);
  }

  get id(): string {
    return this.info.id;
  }

  /** refresh reads the environment again. */
  async refresh(): Promise<EnvironmentRecord> {
    this.info = await ok(this.client.api.GET("/v1/environments/{id}", { params: { path: { id: this.id } } }));
    return this.info;
  }

  /** waitReady waits until the environment is ready (create does this unless told not to). */
  async waitReady(timeoutMs = 5 * 60_000, signal?: AbortSignal): Promise<void> {
    await waitReady(this, timeoutMs, signal);
  }

  private target(): ExecTarget {
    const idle = milliseconds(this.info.idle);
    return {
      ticket: (command) =>
        ok(this.client.api.POST("/v1/environments/{id}/exec", { params: { path: { id: this.id } }, body: { command, tty: false } })),
      touch: async () => {
        await this.touch();
      },
      // As envlease exec: a third of the idle timeout, between 1s and 1m.
      touchEvery: Math.max(1000, Math.min(Number.isNaN(idle) ? 60_000 : idle / 3, 60_000)),
      webSocket: this.client.webSocket,
    };
  }

  /**
   * exec runs a command inside the environment and resolves once it ended,
   * with its exit code and output (a non-zero exit is not an error). A
   * string is run by `sh -c`; an array is the argv. onStdout and onStderr
   * are told the output as it arrives.
   */
  async exec(command: string | string[], o?: ExecOptions): Promise<ExecResult> {
    return exec(this.target(), argv(command), o);
  }

  /** spawn starts a command and hands back its streams, for long-running or interactive ones. */
  async spawn(command: string | string[], o?: SpawnOptions): Promise<Process> {
    return spawn(this.target(), argv(command), o);
  }

  /**
   * logs yields the environment's log as text: what the node holds now
   * and, with follow, what it writes until it ends (or the signal aborts);
   * an ended environment's kept log from its artifact.
   */
  logs(o?: LogOptions): AsyncIterable<string> {
    return followLogs(this, o ?? {});
  }

  /** preview makes a link that opens one of the environment's exports in a plain browser. */
  async preview(o: PreviewOptions = {}): Promise<Preview> {
    return ok(this.client.api.POST("/v1/environments/{id}/previews", { params: { path: { id: this.id } }, body: o }));
  }

  /**
   * checkpoint saves the environment's files as a sealed artifact and waits
   * until it is; lease with `snapshot: checkpoint.artifact` (or fork) to
   * start another environment from it.
   */
  async checkpoint(o: CheckpointOptions = {}): Promise<Checkpoint> {
    let ans = await ok(
      this.client.api.POST("/v1/environments/{id}/checkpoints", { params: { path: { id: this.id }, query: { wait: "20s" } }, body: o }),
    );
    while (ans.checkpoint?.state === "packing") {
      ans = await ok(
        this.client.api.GET("/v1/environments/{id}/checkpoints/{checkpoint}", {
          params: { path: { id: this.id, checkpoint: ans.checkpoint.id! }, query: { wait: "20s" } },
        }),
      );
    }
    const cp = ans.checkpoint!;
    if (cp.state !== "sealed") throw new Error(`checkpoint ${cp.id} of ${this.id} failed: ${cp.error}`);
    return cp;
  }

  /** fork checkpoints this environment and leases another of its template from the checkpoint. */
  async fork(o: ForkOptions = {}): Promise<Environment> {
    const { name, expires, envName, ...lease } = o;
    const cp = await this.checkpoint({ name, expires });
    return this.client.create({ ...lease, template: this.info.template, snapshot: cp.artifact, name: envName });
  }

  /** touch moves the idle timeout on, as using the environment does. */
  async touch(): Promise<EnvironmentRecord> {
    this.info = await ok(this.client.api.POST("/v1/environments/{id}/touch", { params: { path: { id: this.id } } }));
    return this.info;
  }

  /** delete stops the environment and releases its quota; deleting a deleted one is not an error. */
  async delete(): Promise<void> {
    try {
      this.info = await ok(this.client.api.DELETE("/v1/environments/{id}", { params: { path: { id: this.id } } }));
    } catch (e) {
      if (e instanceof EnvleaseError && (e.code === "gone" || e.code === "not_found")) return;
      throw e;
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.delete();
  }
}

function argv(command: string | string[]): string[] {
  return typeof command === "string" ? ["sh", "-c", command] : command;
}
