import { test } from "node:test";
import assert from "node:assert/strict";
import type { ErrorCode } from "@envlease/sdk";

// The codes of the API description's errors (docs/api.md): ErrorCode is
// generated from it, so this list fails to compile when one goes missing or
// a new one is not listed here.
const codes = [
  "bad_request", "unauthorized", "forbidden", "insufficient_scope", "restricted", "exec_disabled", "not_found",
  "method_not_allowed", "conflict", "gone", "too_large", "invalid", "quota", "budget", "locked", "internal", "unavailable", "waking", "no_node",
] as const satisfies readonly ErrorCode[];
type Missing = Exclude<ErrorCode, (typeof codes)[number]>;
const none: [Missing] extends [never] ? true : Missing = true;

test("ErrorCode is the API description's codes", () => {
  assert.equal(none, true);
  assert.equal(new Set(codes).size, codes.length);
});
