// What the tests share: the client of the stack the Go test started
// (ENVLEASE_URL, ENVLEASE_TOKEN: the demo's bob), or of any other.
import { Envlease } from "@envlease/sdk";

export function client(): Envlease {
  return new Envlease();
}
