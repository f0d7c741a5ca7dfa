/**
 * Regenerate src/schema.ts from a hermes-redis server's /openapi.json.
 *
 *   npm run gen                         # starts a private server (tools/stack.ts) and reads it
 *   npm run gen -- http://host:8080     # a running server
 *   npm run gen -- openapi.json         # a saved document
 */
import { writeFileSync } from "node:fs";
import { fetchOpenApi, readOpenApi, renderSchema, SCHEMA_FILE } from "./schema.js";
import { Stack } from "./stack.js";

async function openapi(source: string | undefined): Promise<object> {
  if (source === undefined) {
    const stack = await Stack.start();
    try {
      return await fetchOpenApi(stack.url);
    } finally {
      await stack.stop();
    }
  }
  return /^https?:\/\//.test(source) ? fetchOpenApi(source) : readOpenApi(source);
}

const source = process.argv[2];
writeFileSync(SCHEMA_FILE, await renderSchema(await openapi(source)));
console.log(`wrote ${SCHEMA_FILE} from ${source ?? "a private hermes-redis serve"}`);
