// Commands inside an environment: the node's exec protocol (docs/nodes.md;
// shared/execsession is the Go side). The API hands out a ticket bound to
// the command; the client opens the node's endpoint with it, runs one yamux
// session, and opens four streams, each beginning with a JSON line naming it:
// control, stdin, stdout and stderr. The node answers {"ok": true} on control
// once the command runs, and {"exit": code} last, after the output.

import { ExecError } from "./errors.js";
import { LineReader, jsonLine } from "./lines.js";
import { Session, type Stream } from "./yamux.js";
import { dial, type WebSocketConstructor } from "./socket.js";

/** Signals a running command may be sent, by name. */
export type Signal = "HUP" | "INT" | "QUIT" | "KILL" | "USR1" | "USR2" | "TERM";

export interface SpawnOptions {
  /**
   * The command's input, whole; it ends with it. Without it, spawn leaves
   * the input open for write() until closeStdin(), and exec sends none.
   */
  stdin?: string | Uint8Array | ReadableStream<Uint8Array>;
  /** Aborting kills the command and ends the session. */
  signal?: AbortSignal;
}

export interface ExecOptions extends SpawnOptions {
  /** Told each piece of standard output as it arrives. */
  onStdout?: (text: string) => void;
  /** Told each piece of standard error as it arrives. */
  onStderr?: (text: string) => void;
}

/** What a finished command left: its exit code and its output. */
export interface ExecResult {
  /** The exit status, or 128 + the signal that killed it, as a shell says. */
  exitCode: number;
  stdout: string;
  stderr: string;
}

interface Status {
  ok?: boolean;
  error?: string;
  exit?: number;
}

/**
 * A command running inside an environment. Read stdout and stderr (or
 * cancel them): output nobody reads holds the command once a stream's
 * window (256 KiB) is full.
 */
export class Process {
  /** The command's standard output, as it comes. */
  readonly stdout: ReadableStream<Uint8Array>;
  /** Its standard error. */
  readonly stderr: ReadableStream<Uint8Array>;
  /** Resolves with the exit code once the command ended and its output was sent. */
  readonly exited: Promise<number>;

  /** @internal */
  constructor(
    private readonly session: Session,
    private readonly control: Stream,
    private readonly stdin: Stream,
    stdout: Stream,
    stderr: Stream,
    exited: Promise<number>,
  ) {
    this.stdout = stdout.readable;
    this.stderr = stderr.readable;
    this.exited = exited;
  }

  /** write sends bytes (or text, as UTF-8) to the command's input. */
  async write(data: string | Uint8Array): Promise<void> {
    await this.stdin.write(typeof data === "string" ? new TextEncoder().encode(data) : data);
  }

  /** closeStdin ends the command's input. */
  closeStdin(): void {
    this.stdin.closeWrite();
  }

  /** kill sends the command a signal (TERM unless named). */
  async kill(signal: Signal = "TERM"): Promise<void> {
    await this.control.write(jsonLine({ signal }));
  }

  /** @internal */
  close(): void {
    this.session.close();
  }
}

/** @internal What spawn needs of the environment. */
export interface ExecTarget {
  ticket(command: string[]): Promise<{ url: string; ticket: string }>;
  touch(): Promise<void>;
  touchEvery: number;
  webSocket?: WebSocketConstructor;
}

/** @internal */
export async function spawn(t: ExecTarget, command: string[], o: SpawnOptions = {}): Promise<Process> {
  o.signal?.throwIfAborted();
  const tk = await t.ticket(command);
  const conn = await dial(tk.url, tk.ticket, t.webSocket);
  const session = new Session(conn);
  const opened: Stream[] = [];
  const open = async (hello: object) => {
    const s = session.open();
    opened.push(s);
    await s.write(jsonLine(hello));
    return s;
  };
  let control: Stream, stdin: Stream, stdout: Stream, stderr: Stream;
  let lines: LineReader;
  try {
    control = await open({ stream: "control", command, tty: false });
    stdin = await open({ stream: "stdin" });
    stdout = await open({ stream: "stdout" });
    stderr = await open({ stream: "stderr" });
    lines = new LineReader(control.readable);
    const st = await lines.next<Status>();
    if (!st) throw new ExecError("the connection to the node ended before the command started");
    if (!st.ok) throw new ExecError(`the node did not run the command: ${st.error || "refused"}`);
  } catch (e) {
    session.close();
    throw e instanceof ExecError ? e : new ExecError(`the connection to the node ended: ${(e as Error).message}`);
  }
  // The environment is in use while the command runs, as envlease exec
  // says by touching it.
  const touching = setInterval(() => void t.touch().catch(() => {}), t.touchEvery);
  const onAbort = () => {
    void control.write(jsonLine({ signal: "KILL" })).catch(() => {});
    session.close();
  };
  o.signal?.addEventListener("abort", onAbort, { once: true });
  const exited = (async () => {
    try {
      for (;;) {
        const st = await lines.next<Status>();
        if (!st) throw new ExecError("the connection to the node ended before the command did");
        if (st.exit !== undefined) return st.exit;
      }
    } catch (e) {
      if (o.signal?.aborted) throw o.signal.reason;
      throw e instanceof ExecError ? e : new ExecError(`the connection to the node ended before the command did: ${(e as Error).message}`);
    } finally {
      clearInterval(touching);
      o.signal?.removeEventListener("abort", onAbort);
    }
  })();
  const p = new Process(session, control, stdin, stdout, stderr, exited);
  // Without input given, the input stays open for write() until closeStdin().
  if (o.stdin !== undefined) void feed(p, stdin, o.stdin);
  // The session ends once the command did: its output has all arrived by
  // then (the node sends the exit last), and stays readable.
  void exited.then(
    () => session.close(),
    () => session.close(),
  );
  return p;
}

async function feed(p: Process, stdin: Stream, input: SpawnOptions["stdin"]): Promise<void> {
  try {
    if (typeof input === "string" || input instanceof Uint8Array) {
      await p.write(input);
    } else if (input) {
      const r = input.getReader();
      for (;;) {
        const { value, done } = await r.read();
        if (done) break;
        await stdin.write(value);
      }
    }
  } catch {
    // The command ended before it read all its input.
  }
  stdin.closeWrite();
}

async function collect(s: ReadableStream<Uint8Array>, each?: (text: string) => void): Promise<string> {
  const dec = new TextDecoder();
  let all = "";
  const r = s.getReader();
  for (;;) {
    const { value, done } = await r.read();
    if (done) break;
    const text = dec.decode(value, { stream: true });
    if (text) {
      all += text;
      each?.(text);
    }
  }
  const rest = dec.decode();
  if (rest) {
    all += rest;
    each?.(rest);
  }
  return all;
}

/** @internal */
export async function exec(t: ExecTarget, command: string[], o: ExecOptions = {}): Promise<ExecResult> {
  const p = await spawn(t, command, { ...o, stdin: o.stdin ?? "" });
  try {
    const [stdout, stderr, exitCode] = await Promise.all([collect(p.stdout, o.onStdout), collect(p.stderr, o.onStderr), p.exited]);
    return { exitCode, stdout, stderr };
  } finally {
    p.close();
  }
}
