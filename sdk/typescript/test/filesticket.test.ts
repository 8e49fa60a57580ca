import { test } from "node:test";
import assert from "node:assert/strict";
import { Envlease, FileError } from "@envlease/sdk";

// An API that hands out files tickets and a node that takes only the newest:
// an older one gets what a node that no longer holds the environment answers
// (it paused and woke elsewhere).
function movingNode() {
  const s = { issued: 0, sent: [] as string[] };
  const json = (v: unknown, status = 200) => new Response(JSON.stringify(v), { status, headers: { "Content-Type": "application/json" } });
  const f = async (input: RequestInfo | URL, init?: RequestInit) => {
    const req = input instanceof Request ? input : new Request(input, init);
    const u = new URL(req.url);
    if (u.pathname === "/v1/environments/env_1" && req.method === "GET") return json({ id: "env_1", state: "ready", template: "shell" });
    if (u.pathname === "/v1/environments/env_1/files") {
      s.issued++;
      return json({ url: "http://node.test/files", ticket: `t${s.issued}`, expires: new Date(Date.now() + 300_000).toISOString(), write: true });
    }
    if (u.host === "node.test") {
      const tk = req.headers.get("Authorization")!.replace("Bearer ", "");
      s.sent.push(`${tk}:${await req.text()}`);
      if (tk !== `t${s.issued}`) return json({ error: "gone", code: "not_found", reason: "environment_gone" }, 404);
      if (u.searchParams.get("path") === "missing") return json({ error: "no such file", code: "not_found", reason: "not_found" }, 404);
      return json({ name: "a", path: "/a", type: "file", size: 1, mode: "0644", modified: "" });
    }
    return json({ error: "no route", code: "not_found" }, 404);
  };
  return { s, fetch: f as typeof fetch };
}

test("files: a ticket the node no longer takes is dropped and the request sent once more", async () => {
  const m = movingNode();
  const env = await new Envlease({ url: "http://api.test", token: "els_t", fetch: m.fetch }).get("env_1");
  await env.files.stat("a");
  await env.files.write("a", "one");
  m.s.issued++; // the environment moved: the node takes only a newer ticket
  await env.files.write("a", "hello");
  // A missing file is the request's own answer: not sent again.
  await assert.rejects(env.files.stat("missing"), (e: unknown) => e instanceof FileError && e.reason === "not_found");
  m.s.issued++;
  // A stream was read once: not sent again, but its ticket is dropped.
  const stream = new ReadableStream<Uint8Array>({ start: (c) => (c.enqueue(new TextEncoder().encode("streamed")), c.close()) });
  await assert.rejects(env.files.write("a", stream), (e: unknown) => e instanceof FileError && e.reason === "environment_gone");
  await env.files.write("a", "again");
  assert.deepEqual(m.s.sent, ["t1:", "t2:one", "t2:hello", "t4:hello", "t1:", "t4:", "t4:streamed", "t6:again"]);
});
