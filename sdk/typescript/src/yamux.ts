// A yamux client session over a message socket: what the node's endpoint
// speaks for tunnels, exec and files (docs/nodes.md; the Go side is
// github.com/hashicorp/yamux, configured in shared/tunnel). Written here
// rather than taken from npm because the yamux packages there are libp2p's
// (its stream and connection model) or built on Node's streams, and the SDK
// must run wherever fetch and WebSocket do.
//
// Frames: a 12-byte header (version 0, type, flags, stream id, length), and
// for a data frame, length bytes. Streams the client opens have odd ids.
// Each direction of a stream has a window (256 KiB to start): a sender
// sends at most that many unacknowledged bytes, and the receiver grants more
// with window updates as it consumes them, so a reader that stops reading
// stalls only its own stream.

import type { Conn } from "./socket.js";

const headerSize = 12;
const typeData = 0;
const typeWindowUpdate = 1;
const typePing = 2;
const typeGoAway = 3;
const flagSYN = 1;
const flagACK = 2;
const flagFIN = 4;
const flagRST = 8;
const initialWindow = 256 * 1024;
// The largest data frame sent: the node reads a frame's body whole before
// the next, so smaller frames keep both ends busy.
const maxFrame = 64 * 1024;

function header(type: number, flags: number, stream: number, length: number): Uint8Array {
  const b = new Uint8Array(headerSize);
  const v = new DataView(b.buffer);
  v.setUint8(0, 0);
  v.setUint8(1, type);
  v.setUint16(2, flags);
  v.setUint32(4, stream);
  v.setUint32(8, length);
  return b;
}

/** A yamux session; the client side, which opens every stream. */
export class Session {
  private nextId = 1;
  private readonly streams = new Map<number, Stream>();
  private buf: Uint8Array = new Uint8Array(0);
  private closedWith: Error | undefined;
  private closed = false;

  constructor(private readonly conn: Conn) {
    conn.onmessage = (b) => this.receive(b);
    conn.onclose = (err) => this.shutdown(err ?? new Error("the connection to the node ended"));
  }

  /** open starts a new stream. */
  open(): Stream {
    if (this.closed) throw this.closedWith ?? new Error("session closed");
    const id = this.nextId;
    this.nextId += 2;
    const s = new Stream(this, id);
    this.streams.set(id, s);
    this.send(header(typeWindowUpdate, flagSYN, id, 0));
    return s;
  }

  /** close ends the session and every stream in it. */
  close(): void {
    if (this.closed) return;
    try {
      this.send(header(typeGoAway, 0, 0, 0));
    } catch {
      // The connection is gone already.
    }
    this.shutdown(new Error("session closed"));
    this.conn.close();
  }

  /** @internal */
  send(b: Uint8Array): void {
    if (this.closed) throw this.closedWith ?? new Error("session closed");
    this.conn.send(b);
  }

  /** @internal */
  forget(id: number): void {
    this.streams.delete(id);
  }

  private shutdown(err: Error): void {
    if (this.closed) return;
    this.closed = true;
    this.closedWith = err;
    for (const s of this.streams.values()) s.fail(err);
    this.streams.clear();
  }

  private receive(chunk: Uint8Array): void {
    if (this.buf.length === 0) {
      this.buf = chunk;
    } else {
      const b = new Uint8Array(this.buf.length + chunk.length);
      b.set(this.buf);
      b.set(chunk, this.buf.length);
      this.buf = b;
    }
    while (this.buf.length >= headerSize) {
      const v = new DataView(this.buf.buffer, this.buf.byteOffset, headerSize);
      const type = v.getUint8(1);
      const flags = v.getUint16(2);
      const id = v.getUint32(4);
      const length = v.getUint32(8);
      if (v.getUint8(0) !== 0) {
        this.shutdown(new Error("yamux: unknown protocol version"));
        this.conn.close();
        return;
      }
      let body: Uint8Array | undefined;
      if (type === typeData) {
        if (this.buf.length < headerSize + length) return;
        body = this.buf.subarray(headerSize, headerSize + length);
        this.buf = this.buf.subarray(headerSize + length);
      } else {
        this.buf = this.buf.subarray(headerSize);
      }
      this.frame(type, flags, id, length, body);
      if (this.closed) return;
    }
  }

  private frame(type: number, flags: number, id: number, length: number, body?: Uint8Array): void {
    switch (type) {
      case typePing:
        if (flags & flagSYN) this.send(header(typePing, flagACK, 0, length));
        return;
      case typeGoAway:
        this.shutdown(new Error("the node ended the session"));
        this.conn.close();
        return;
      case typeData:
      case typeWindowUpdate: {
        const s = this.streams.get(id);
        if (!s) {
          // A stream the node opens, or one already forgotten: refuse or ignore.
          if (flags & flagSYN) this.send(header(typeWindowUpdate, flagRST, id, 0));
          return;
        }
        if (type === typeWindowUpdate) s.grant(length);
        else if (body && body.length > 0) s.push(body.slice());
        if (flags & flagRST) s.fail(new Error("the node reset the stream"));
        else if (flags & flagFIN) s.end();
        return;
      }
    }
  }
}

/** One stream of a session: bytes both ways, and each side's end. */
export class Stream {
  private sendWindow = initialWindow;
  private waiting: Array<() => void> = [];
  private queue: Uint8Array[] = [];
  private pull: (() => void) | undefined;
  private consumed = 0;
  private remoteDone = false;
  private error: Error | undefined;
  private localDone = false;
  /** What the node sends on this stream. */
  readonly readable: ReadableStream<Uint8Array>;

  constructor(
    private readonly session: Session,
    readonly id: number,
  ) {
    this.readable = new ReadableStream<Uint8Array>(
      {
        pull: (controller) => this.deliver(controller),
        cancel: () => this.reset(),
      },
      { highWaterMark: 0 },
    );
  }

  private async deliver(controller: ReadableStreamDefaultController<Uint8Array>): Promise<void> {
    while (this.queue.length === 0 && !this.remoteDone && !this.error) {
      await new Promise<void>((resolve) => (this.pull = resolve));
    }
    const chunk = this.queue.shift();
    if (chunk) {
      controller.enqueue(chunk);
      this.consumed += chunk.length;
      // Grant the node more once half the window is read, as yamux does.
      if (this.consumed >= initialWindow / 2 && !this.error) {
        try {
          this.session.send(header(typeWindowUpdate, 0, this.id, this.consumed));
        } catch {
          // The session ended; the reader learns it next.
        }
        this.consumed = 0;
      }
      return;
    }
    if (this.error) controller.error(this.error);
    else controller.close();
  }

  private wake(): void {
    const p = this.pull;
    this.pull = undefined;
    p?.();
  }

  /** write sends b, waiting while the node's window for this stream is full. */
  async write(b: Uint8Array): Promise<void> {
    let off = 0;
    while (off < b.length) {
      if (this.error) throw this.error;
      if (this.localDone) throw new Error("write after the stream's end");
      if (this.sendWindow === 0) {
        await new Promise<void>((resolve) => this.waiting.push(resolve));
        continue;
      }
      const n = Math.min(b.length - off, this.sendWindow, maxFrame);
      const frame = new Uint8Array(headerSize + n);
      frame.set(header(typeData, 0, this.id, n));
      frame.set(b.subarray(off, off + n), headerSize);
      this.session.send(frame);
      this.sendWindow -= n;
      off += n;
    }
  }

  /** closeWrite ends what this side sends (a half-close); reading goes on. */
  closeWrite(): void {
    if (this.localDone || this.error) return;
    this.localDone = true;
    try {
      this.session.send(header(typeWindowUpdate, flagFIN, this.id, 0));
    } catch {
      // The session ended; nothing to end.
    }
    if (this.remoteDone) this.session.forget(this.id);
  }

  /** reset abandons the stream both ways. */
  reset(): void {
    if (this.error) return;
    try {
      this.session.send(header(typeWindowUpdate, flagRST, this.id, 0));
    } catch {
      // The session ended already.
    }
    this.fail(new Error("stream reset"));
  }

  /** @internal */
  grant(n: number): void {
    this.sendWindow += n;
    const w = this.waiting;
    this.waiting = [];
    for (const f of w) f();
  }

  /** @internal */
  push(b: Uint8Array): void {
    this.queue.push(b);
    this.wake();
  }

  /** @internal */
  end(): void {
    this.remoteDone = true;
    if (this.localDone) this.session.forget(this.id);
    this.wake();
  }

  /** @internal */
  fail(err: Error): void {
    // A stream the node ended holds all it will get: its reader keeps it
    // whatever becomes of the session.
    if (this.error || this.remoteDone) return;
    this.error = err;
    this.session.forget(this.id);
    this.wake();
    this.grant(0);
  }
}
