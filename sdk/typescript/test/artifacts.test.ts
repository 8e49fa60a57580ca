import { test } from "node:test";
import assert from "node:assert/strict";
import { client } from "./helpers.js";

test("artifacts up and down, and their links", async () => {
  const envlease = client();
  const a = await envlease.artifacts.upload("hello, artifact\n", { name: "hello.txt", contentType: "text/plain", expires: "1h" });
  assert.equal(a.state, "sealed");
  assert.equal(a.size, 16);
  const back = await envlease.artifacts.download(a.id);
  assert.equal(new TextDecoder().decode(back), "hello, artifact\n");
  const link = await envlease.artifacts.link(a.id, { expires: "10m" });
  const res = await fetch(link.url);
  assert.equal(await res.text(), "hello, artifact\n");

  const empty = await envlease.artifacts.upload(new Uint8Array(0), { name: "empty" });
  assert.equal((await envlease.artifacts.download(empty.id)).length, 0);
});
