/** Message ids: the server's shape (32 hex, 48-bit milliseconds first), unique, made on Node 18 too. */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { it } from "node:test";
import { newMessageId } from "hermes-redis";

it("newMessageId is 32 hex digits, time first, and unique", async () => {
  const before = Date.now();
  const ids = await Promise.all(Array.from({ length: 2000 }, () => newMessageId()));
  const after = Date.now();
  for (const id of ids) assert.match(id, /^[0-9a-f]{32}$/);
  const millis = parseInt(ids[0]!.slice(0, 12), 16);
  assert.ok(before <= millis && millis <= after, "the first 12 digits are the time in ms");
  assert.equal(new Set(ids).size, ids.length);
});

it("without a global crypto (Node 18) the ids come from node:crypto", () => {
  const script = new URL("../../test/support/no-global-crypto.mjs", import.meta.url);
  const out = execFileSync(process.execPath, ["--no-experimental-global-webcrypto", script.pathname], { encoding: "utf8" });
  assert.match(out.trim(), /^[0-9a-f]{32}$/);
});
