// Webhook signatures (docs/events.md): Envlease-Signature is
// "t=<unix seconds>,v1=<hex>", v1 being HMAC-SHA256 with the webhook's
// secret over "<t>.<body>". The timestamp is signed, so rejecting old ones
// also rejects replays of a captured delivery.

import { WebhookSignatureError } from "./errors.js";

export interface VerifyOptions {
  /** The webhook's signing secret (whsec_…). */
  secret: string;
  /** The Envlease-Signature header's value. */
  signature: string | null | undefined;
  /** The request body exactly as received. */
  body: string | Uint8Array;
  /** How old (or ahead) a delivery may be, in seconds; default 300. */
  toleranceSeconds?: number;
  /** Now, for tests (default: the clock). */
  now?: Date;
}

const enc = new TextEncoder();

async function hmac(secret: string, t: string, body: Uint8Array): Promise<Uint8Array> {
  const key = await crypto.subtle.importKey("raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const msg = new Uint8Array(t.length + 1 + body.length);
  msg.set(enc.encode(t + "."));
  msg.set(body, t.length + 1);
  return new Uint8Array(await crypto.subtle.sign("HMAC", key, msg));
}

function hex(b: Uint8Array): string {
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** signWebhook is the Envlease-Signature of body sent at `at`, for a receiver's own tests. */
export async function signWebhook(secret: string, body: string | Uint8Array, at: Date = new Date()): Promise<string> {
  const t = String(Math.floor(at.getTime() / 1000));
  return `t=${t},v1=${hex(await hmac(secret, t, typeof body === "string" ? enc.encode(body) : body))}`;
}

/**
 * verifyWebhook checks a delivery's signature and age and returns its
 * event, parsed; it throws WebhookSignatureError for one that does not check.
 */
export async function verifyWebhook<T = unknown>(o: VerifyOptions): Promise<T> {
  let t = "";
  const sigs: string[] = [];
  for (const part of (o.signature ?? "").split(",")) {
    const i = part.indexOf("=");
    const k = part.slice(0, i).trim();
    const v = part.slice(i + 1).trim();
    if (k === "t") t = v;
    else if (k === "v1") sigs.push(v.toLowerCase());
  }
  if (!/^[0-9]+$/.test(t) || sigs.length === 0) throw new WebhookSignatureError("malformed signature header");
  const age = (o.now ?? new Date()).getTime() / 1000 - Number(t);
  const tolerance = o.toleranceSeconds ?? 300;
  if (age > tolerance || age < -tolerance) throw new WebhookSignatureError("stale timestamp");
  const body = typeof o.body === "string" ? enc.encode(o.body) : o.body;
  const want = hex(await hmac(o.secret, t, body));
  // Compared in full whatever the first difference, so the time taken says nothing.
  let match = false;
  for (const s of sigs) {
    let diff = s.length ^ want.length;
    for (let i = 0; i < want.length; i++) diff |= want.charCodeAt(i) ^ (s.charCodeAt(i) || 0);
    match ||= diff === 0;
  }
  if (!match) throw new WebhookSignatureError("signature mismatch");
  return JSON.parse(new TextDecoder().decode(body)) as T;
}
