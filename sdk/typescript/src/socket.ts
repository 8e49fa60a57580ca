// The connection a yamux session runs on: a WebSocket to the node's
// endpoint, the ticket as its bearer token. The ticket travels only in the
// Authorization header, so the WebSocket must be one that sends headers:
// the `ws` package (an optional dependency, on Node.js) where it can be
// imported, else the runtime's global WebSocket given {headers} as its
// second argument, which Deno and Bun honour. A browser's WebSocket cannot
// send the header (docs/sdk.md, "Where it runs"). `ws` comes first where it
// is installed because sending headers is not part of the WebSocket
// standard, and a global WebSocket that ignores them would be refused.

/** A message connection, as the yamux session uses it. */
export interface Conn {
  send(b: Uint8Array): void;
  close(): void;
  onmessage?: (b: Uint8Array) => void;
  onclose?: (err?: Error) => void;
}

/** A WebSocket constructor that takes {headers} as its second argument. */
export type WebSocketConstructor = new (url: string, init: { headers: Record<string, string> }) => WebSocket;

async function defaultWebSocket(): Promise<WebSocketConstructor> {
  // A name in a variable keeps bundlers for browsers from resolving it.
  const name = "ws";
  try {
    const mod = (await import(name)) as { default: unknown };
    if (typeof mod.default === "function") return mod.default as WebSocketConstructor;
  } catch {
    // Not installed, or not a runtime that has it: the global one.
  }
  const g = (globalThis as { WebSocket?: unknown }).WebSocket;
  if (typeof g === "function") return g as WebSocketConstructor;
  throw new Error("no WebSocket: the optional package ws is not installed (npm install ws) and this runtime has no global WebSocket");
}

/** dial opens a WebSocket to url with ticket as its bearer token. */
export async function dial(url: string, ticket: string, impl?: WebSocketConstructor): Promise<Conn> {
  const WS = impl ?? (await defaultWebSocket());
  const wsURL = url.replace(/^http(s?):\/\//, "ws$1://");
  const ws = new WS(wsURL, { headers: { Authorization: `Bearer ${ticket}` } });
  ws.binaryType = "arraybuffer";
  await new Promise<void>((resolve, reject) => {
    ws.onopen = () => resolve();
    ws.onerror = (ev) => {
      const msg = (ev as { message?: string }).message;
      reject(new Error(`the node's endpoint ${url} refused the connection${msg ? ": " + msg : ""}`));
    };
  });
  const conn: Conn = {
    send: (b) => ws.send(b),
    close: () => ws.close(),
  };
  let ended = false;
  const end = (err?: Error) => {
    if (ended) return;
    ended = true;
    conn.onclose?.(err);
  };
  ws.onmessage = (ev: MessageEvent) => {
    const d = ev.data as ArrayBuffer | Uint8Array;
    conn.onmessage?.(d instanceof Uint8Array ? d : new Uint8Array(d));
  };
  ws.onerror = () => end(new Error("the connection to the node failed"));
  ws.onclose = () => end();
  return conn;
}
