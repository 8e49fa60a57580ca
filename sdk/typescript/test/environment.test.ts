import { test } from "node:test";
import assert from "node:assert/strict";
import { Envlease, EnvleaseError, type Environment } from "@envlease/sdk";
import { client } from "./helpers.js";

test("create waits for ready, exec streams output and an exit code, await using deletes", async () => {
  const envlease = client();
  let leased: Environment | undefined;
  {
    await using env = await envlease.create({ template: "shell", labels: { suite: "sdk" } });
    leased = env;
    assert.equal(env.info.state, "ready");
    assert.equal(env.info.labels.suite, "sdk");

    const seen: string[] = [];
    const r = await env.exec("echo out; echo err >&2; exit 3", { onStdout: (s) => seen.push(s) });
    assert.deepEqual(r, { exitCode: 3, stdout: "out\n", stderr: "err\n" });
    assert.equal(seen.join(""), "out\n");

    // An argv runs as it is; the template's environment and folder are the command's.
    const argv = await env.exec(["sh", "-c", 'echo "$GREETING" && pwd']);
    assert.equal(argv.exitCode, 0);
    assert.match(argv.stdout, /^hello\n.*workspace\n$/);

    const cat = await env.exec("wc -c", { stdin: "x".repeat(300_000) });
    assert.equal(cat.stdout.trim(), "300000");

    // Output larger than a stream's window arrives whole.
    const big = await env.exec("head -c 1000000 /dev/zero | tr '\\0' a");
    assert.equal(big.stdout.length, 1_000_000);
  }
  const after = await envlease.get(leased!.id);
  assert.ok(["stopping", "stopped"].includes(after.info.state), after.info.state);
});

test("spawn: input written as it goes, a signal, the exit", async () => {
  await using env = await client().create({ template: "shell" });
  const p = await env.spawn(["sh", "-c", "read line; echo got $line; sleep 60"]);
  await p.write("one\n");
  const reader = p.stdout.getReader();
  const { value } = await reader.read();
  assert.equal(new TextDecoder().decode(value), "got one\n");
  await p.kill("TERM");
  assert.equal(await p.exited, 128 + 15);
  reader.releaseLock();
});

test("errors carry the API's code and status", async () => {
  const envlease = client();
  await assert.rejects(envlease.create({ template: "no-such-template" }), (e: unknown) => {
    assert.ok(e instanceof EnvleaseError);
    assert.equal(e.code, "invalid");
    assert.equal(e.status, 422);
    return true;
  });
  await assert.rejects(envlease.get("env_doesnotexist"), { code: "not_found", status: 404 });
  const stranger = new Envlease({ url: process.env.ENVLEASE_URL, token: "els_dev_nobody_0123456789abcdef0123456789abcdef" });
  await assert.rejects(stranger.templates(), { name: "EnvleaseError", code: "unauthorized", status: 401 });
});

test("logs: the live log followed until the environment ends", async () => {
  const envlease = client();
  const env = await envlease.create({ template: "shell" });
  const chunks: string[] = [];
  const following = (async () => {
    for await (const s of env.logs({ follow: true })) chunks.push(s);
  })();
  // The log holds the node's line that the environment started.
  while (!chunks.join("").includes("] started")) await new Promise((r) => setTimeout(r, 50));
  await env.delete();
  await following;
  let kept = "";
  for (let i = 0; i < 100 && !kept.includes("] started"); i++) {
    kept = "";
    try {
      for await (const s of env.logs()) kept += s;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  assert.match(kept, /\] started/);
});

test("a preview link of an export", async () => {
  await using env = await client().create({ template: "shell" });
  const p = await env.preview({ export: "web", expires: "10m" });
  assert.equal(p.export, "web");
  assert.ok(p.url.startsWith("http"), p.url);
  assert.ok(new URL(p.url).hostname === p.host, `${p.url} is not on ${p.host}`);
});

test("a checkpoint, a lease from it, and a fork: the copies have the files", async () => {
  const envlease = client();
  await using env = await envlease.create({ template: "shell" });
  await env.exec("echo kept > note.txt");
  const cp = await env.checkpoint({ name: "sdk-test.tar.zst" });
  assert.equal(cp.state, "sealed");
  assert.ok(cp.artifact);
  {
    await using restored = await envlease.create({ template: "shell", snapshot: cp.artifact });
    assert.equal(restored.info.snapshot, cp.artifact);
    assert.equal((await restored.exec("cat note.txt")).stdout, "kept\n");
  }
  await env.exec("echo changed > note.txt");
  await using copy = await env.fork({ envName: "sdk-fork" });
  assert.notEqual(copy.id, env.id);
  assert.equal(copy.info.name, "sdk-fork");
  assert.equal((await copy.exec("cat note.txt")).stdout, "changed\n");
});
