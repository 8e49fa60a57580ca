import { test } from "node:test";
import assert from "node:assert/strict";
import { Envlease, EnvleaseError } from "@envlease/sdk";

// A fetch that answers from a script and records what it was asked.
function scripted(answers: Response[]) {
  const asked: string[] = [];
  const f = async (input: RequestInfo | URL) => {
    const req = input as Request;
    asked.push(`${req.method} ${new URL(req.url).pathname} ${req.headers.get("Authorization")}`);
    const next = answers.shift();
    if (!next) throw new Error("no more answers");
    return next;
  };
  return { asked, fetch: f as typeof fetch };
}

const unavailable = () =>
  new Response(JSON.stringify({ error: "try again", code: "unavailable" }), { status: 503, headers: { "Retry-After": "1", "Content-Type": "application/json" } });

test("reads are sent again while the service is unavailable; leases are not", async () => {
  const ok = new Response(JSON.stringify({ templates: [], pools: [] }), { headers: { "Content-Type": "application/json" } });
  const s = scripted([unavailable(), ok]);
  const envlease = new Envlease({ url: "http://api.test/", token: "els_t", fetch: s.fetch });
  assert.deepEqual(await envlease.templates(), []);
  assert.deepEqual(s.asked, ["GET /v1/templates Bearer els_t", "GET /v1/templates Bearer els_t"]);

  const once = scripted([unavailable()]);
  const e = await new Envlease({ url: "http://api.test", token: "els_t", fetch: once.fetch }).create({ template: "shell" }).catch((e: unknown) => e);
  assert.ok(e instanceof EnvleaseError);
  assert.equal(e.code, "unavailable");
  assert.equal(e.retryAfter, 1);
  assert.equal(once.asked.length, 1);
});

test("url and token come from the options or ENVLEASE_URL and ENVLEASE_TOKEN", () => {
  const saved = { url: process.env.ENVLEASE_URL, token: process.env.ENVLEASE_TOKEN };
  try {
    delete process.env.ENVLEASE_URL;
    delete process.env.ENVLEASE_TOKEN;
    assert.throws(() => new Envlease(), /ENVLEASE_URL/);
    assert.throws(() => new Envlease({ url: "http://api.test" }), /ENVLEASE_TOKEN/);
    process.env.ENVLEASE_URL = "http://api.test";
    process.env.ENVLEASE_TOKEN = "els_t";
    assert.ok(new Envlease());
  } finally {
    for (const [k, v] of [["ENVLEASE_URL", saved.url], ["ENVLEASE_TOKEN", saved.token]] as const) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
});
