/**
 * Client and server cannot drift: the schema a real `hermes-redis serve` answers at
 * /openapi.json, rendered as `npm run gen` renders it, must equal the committed src/schema.ts.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { it } from "node:test";
import { fetchOpenApi, renderSchema, SCHEMA_FILE } from "../tools/schema.js";
import { useStack } from "./support/fixture.js";

const stack = useStack();

/** The first differing line of two texts, with its number, for the failure message. */
function firstDifference(want: string, got: string): string {
  const a = want.split("\n");
  const b = got.split("\n");
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if (a[i] !== b[i]) return `line ${i + 1}:\n  server:    ${a[i] ?? "(end)"}\n  committed: ${b[i] ?? "(end)"}`;
  }
  return "(none)";
}

it("src/schema.ts is what the server's /openapi.json generates", async () => {
  const openapi = await fetchOpenApi(stack().url);
  const fresh = await renderSchema(openapi);
  const committed = readFileSync(SCHEMA_FILE, "utf8");
  assert.ok(
    fresh === committed,
    `src/schema.ts differs from the server's /openapi.json at ${firstDifference(fresh, committed)}\n` +
      "regenerate it with `npm run gen` (then fix src/wire.ts if the build fails) and commit it",
  );
});

it("the schema has every route the client calls", async () => {
  const openapi = (await fetchOpenApi(stack().url)) as { paths: Record<string, Record<string, unknown>> };
  const calls: [string, string][] = [
    ["post", "/v1/sessions"],
    ["get", "/v1/sessions"],
    ["get", "/v1/sessions/{session_id}"],
    ["delete", "/v1/sessions/{session_id}"],
    ["post", "/v1/sessions/{session_id}/messages"],
    ["get", "/v1/sessions/{session_id}/messages"],
    ["get", "/v1/sessions/{session_id}/context"],
    ["post", "/v1/sessions/{session_id}/forget"],
    ["post", "/v1/sessions/{session_id}/clear"],
    ["post", "/v1/sessions/{session_id}/pop"],
    ["post", "/v1/sessions/{session_id}/archive"],
    ["post", "/v1/sessions/{session_id}/restore"],
    ["post", "/v1/sessions/{session_id}/compact"],
    ["post", "/v1/memories"],
    ["get", "/v1/memories"],
    ["delete", "/v1/memories/{memory_id}"],
    ["get", "/v1/search"],
    ["get", "/readyz"],
  ];
  const missing = calls.filter(([method, path]) => !openapi.paths[path]?.[method]);
  assert.deepEqual(missing, []);
});
