// Artifacts: sealed files of the organization (docs/api.md, artifacts).
// Upload is create (declaring size and SHA-256, and each part's for a file
// larger than the part size), a presigned PUT per part, then complete;
// object storage checks every byte against the digests declared.

import type { components } from "./openapi.js";
import type { Envlease } from "./client.js";
import { ok } from "./client.js";

export type Artifact = components["schemas"]["Artifact"];
export type Link = components["schemas"]["Link"];

export interface UploadOptions {
  /** The download's file name. */
  name: string;
  contentType?: string;
  labels?: Record<string, string>;
  project?: string;
  /** A duration (`24h`) or an RFC 3339 time; default 7 days. */
  expires?: string;
}

/** The service's part size: files larger go up in parts of this size. */
const partSize = 64 * 1024 * 1024;

async function sha256(b: Uint8Array): Promise<string> {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", b as Uint8Array<ArrayBuffer>));
  return Array.from(d, (x) => x.toString(16).padStart(2, "0")).join("");
}

async function bytesOf(data: string | Uint8Array | ArrayBuffer | Blob): Promise<Uint8Array> {
  if (typeof data === "string") return new TextEncoder().encode(data);
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return new Uint8Array(await data.arrayBuffer());
}

export class Artifacts {
  /** @internal */
  constructor(private readonly client: Envlease) {}

  /** upload stores data as a new sealed artifact. */
  async upload(data: string | Uint8Array | ArrayBuffer | Blob, o: UploadOptions): Promise<Artifact> {
    const bytes = await bytesOf(data);
    const parts: string[] = [];
    if (bytes.length > partSize) {
      for (let off = 0; off < bytes.length; off += partSize) parts.push(await sha256(bytes.subarray(off, off + partSize)));
    }
    const created = await ok(
      this.client.api.POST("/v1/artifacts", {
        body: {
          name: o.name,
          contentType: o.contentType ?? "application/octet-stream",
          labels: o.labels,
          project: o.project,
          expires: o.expires,
          size: bytes.length,
          sha256: await sha256(bytes),
          parts: parts.length > 0 ? parts : undefined,
        },
      }),
    );
    const id = created.artifact.id;
    const done: { partNumber: number; etag: string }[] = [];
    for (const p of created.upload.parts) {
      const res = await this.client.fetch(p.url, {
        method: p.method,
        headers: p.headers,
        body: bytes.subarray(p.offset, p.offset + p.size) as Uint8Array<ArrayBuffer>,
      });
      if (!res.ok) throw new Error(`artifact ${id}: part ${p.partNumber}: object storage answered ${res.status}: ${(await res.text()).slice(0, 500)}`);
      await res.body?.cancel();
      done.push({ partNumber: p.partNumber, etag: res.headers.get("ETag") ?? "" });
    }
    const tagged = created.upload.multipart && done.every((p) => p.etag);
    return ok(
      this.client.api.POST("/v1/artifacts/{id}/complete", {
        params: { path: { id } },
        body: tagged ? { parts: done } : {},
      }),
    );
  }

  /** get reads an artifact's record. */
  async get(id: string): Promise<Artifact> {
    return ok(this.client.api.GET("/v1/artifacts/{id}", { params: { path: { id } } }));
  }

  /** link makes a signed download link anyone can use until it expires. */
  async link(id: string, o: { expires?: string } = {}): Promise<Link> {
    return ok(this.client.api.POST("/v1/artifacts/{id}/links", { params: { path: { id } }, body: o }));
  }

  /** download reads a sealed artifact through a fresh link and checks its size and SHA-256. */
  async download(id: string): Promise<Uint8Array> {
    const [a, l] = await Promise.all([this.get(id), this.link(id)]);
    const res = await this.client.fetch(l.url);
    if (!res.ok) throw new Error(`artifact ${id}: object storage answered ${res.status}`);
    const b = new Uint8Array(await res.arrayBuffer());
    const got = await sha256(b);
    if (b.length !== a.size || got !== a.sha256.toLowerCase()) {
      throw new Error(`artifact ${id}: checksum mismatch: got ${b.length} bytes with SHA-256 ${got}, want ${a.size} bytes with ${a.sha256}`);
    }
    return b;
  }
}
