// One JSON line per message, as the node's stream protocols begin (and its
// control streams go on): see shared/tunnel and shared/execsession.

const encoder = new TextEncoder();

export function jsonLine(v: unknown): Uint8Array {
  return encoder.encode(JSON.stringify(v) + "\n");
}

/** LineReader reads JSON lines off a byte stream, keeping what follows them. */
export class LineReader {
  private buf = new Uint8Array(0);
  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  private readonly decoder = new TextDecoder();

  constructor(
    stream: ReadableStream<Uint8Array>,
    private readonly max = 2 << 20,
  ) {
    this.reader = stream.getReader();
  }

  /** next is the next line parsed as JSON, or undefined at the stream's end. */
  async next<T>(): Promise<T | undefined> {
    for (;;) {
      const nl = this.buf.indexOf(10);
      if (nl >= 0) {
        const line = this.buf.subarray(0, nl);
        this.buf = this.buf.subarray(nl + 1);
        return JSON.parse(this.decoder.decode(line)) as T;
      }
      if (this.buf.length > this.max) throw new Error("line too long");
      const { value, done } = await this.reader.read();
      if (done) {
        if (this.buf.length > 0) throw new Error("the stream ended within a line");
        return undefined;
      }
      const b = new Uint8Array(this.buf.length + value.length);
      b.set(this.buf);
      b.set(value, this.buf.length);
      this.buf = b;
    }
  }

  release(): void {
    this.reader.releaseLock();
  }
}
