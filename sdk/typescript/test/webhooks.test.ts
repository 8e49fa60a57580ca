import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { signWebhook, verifyWebhook, WebhookSignatureError } from "@envlease/sdk";

const secret = "whsec_" + "ab".repeat(32);
const body = JSON.stringify({ id: "evt_1", type: "environment.ready" });

test("a delivery signed as the service signs it checks", async () => {
  // The service's scheme (shared/webhooks): HMAC-SHA256 over "<t>.<body>" with the whole secret.
  const t = Math.floor(Date.now() / 1000);
  const header = `t=${t},v1=${createHmac("sha256", secret).update(`${t}.${body}`).digest("hex")}`;
  assert.deepEqual(await verifyWebhook({ secret, signature: header, body }), JSON.parse(body));
  assert.equal(await signWebhook(secret, body, new Date(t * 1000)), header);
});

test("a tampered, stale or malformed delivery does not", async () => {
  const now = new Date();
  const header = await signWebhook(secret, body, now);
  const cases: [string, Parameters<typeof verifyWebhook>[0]][] = [
    ["another body", { secret, signature: header, body: body + " " }],
    ["another secret", { secret: secret + "0", signature: header, body }],
    ["stale", { secret, signature: header, body, now: new Date(now.getTime() + 301_000) }],
    ["no header", { secret, signature: undefined, body }],
    ["no v1", { secret, signature: header.split(",")[0], body }],
  ];
  for (const [name, o] of cases) {
    await assert.rejects(verifyWebhook(o), WebhookSignatureError, name);
  }
});
