import { test } from "node:test";
import assert from "node:assert/strict";
import { EnvleaseError, FileError, type Environment } from "@envlease/sdk";
import { client } from "./helpers.js";

// hasFiles reports whether the stack serves files (POST …/files); a
// stack from before them answers 404 or 405 for the route.
async function hasFiles(env: Environment): Promise<boolean> {
  try {
    await env.files.stat(".");
    return true;
  } catch (e) {
    if (e instanceof EnvleaseError && !(e instanceof FileError) && (e.status === 404 || e.status === 405)) return false;
    throw e;
  }
}

test("files: write, read, stat, list, mkdir, remove, and what is refused", async (t) => {
  await using env = await client().create({ template: "shell" });
  if (!(await hasFiles(env))) {
    t.skip("this stack has no files endpoint");
    return;
  }
  const info = await env.files.write("app/run.sh", "#!/bin/sh\necho ran\n", { mode: "0755", parents: true });
  assert.equal(info.type, "file");
  assert.equal(info.mode, "0755");
  assert.equal(info.size, 19);
  // Written as the environment's user, where its command sees it.
  assert.equal((await env.exec("./app/run.sh")).stdout, "ran\n");
  assert.equal(await env.files.readText("app/run.sh"), "#!/bin/sh\necho ran\n");

  const big = new Uint8Array(3 << 20).map((_, i) => i % 251);
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      for (let off = 0; off < big.length; off += 1 << 20) c.enqueue(big.slice(off, off + (1 << 20)));
      c.close();
    },
  });
  await env.files.write("app/big.bin", stream);
  assert.deepEqual(await env.files.read("app/big.bin"), big);

  await env.files.mkdir("app/data/deep", { parents: true });
  const list = await env.files.list("app");
  assert.deepEqual(
    list.entries.map((e) => [e.name, e.type]),
    [["big.bin", "file"], ["data", "dir"], ["run.sh", "file"]],
  );
  assert.equal((await env.files.stat("app/data")).type, "dir");

  await env.files.remove("app/data", { recursive: true });
  assert.equal(await env.files.exists("app/data"), false);
  await assert.rejects(env.files.read("app/nothing"), { name: "FileError", code: "not_found", status: 404, reason: "not_found" });
  await assert.rejects(env.files.read("../../etc/passwd"), (e: unknown) => e instanceof FileError && e.status === 403 || e instanceof FileError && e.status === 400);
  await assert.rejects(env.files.read("/proc/self/environ"), { name: "FileError", status: 403, reason: "special_path" });
});

test("files: a watch sees a write", async (t) => {
  await using env = await client().create({ template: "shell" });
  if (!(await hasFiles(env))) {
    t.skip("this stack has no files endpoint");
    return;
  }
  await env.files.mkdir("watched", { parents: true });
  const signal = AbortSignal.timeout(60_000);
  const seen: string[] = [];
  for await (const change of env.files.watch("watched", { signal })) {
    seen.push(`${change.op} ${change.path ?? ""}`);
    if (change.op === "watching") await env.exec("echo hi > watched/new.txt");
    if (change.path?.endsWith("/new.txt")) break;
  }
  assert.equal(seen[0]?.split(" ")[0], "watching");
  assert.ok(seen.some((s) => s.endsWith("/watched/new.txt")), seen.join("\n"));
});
