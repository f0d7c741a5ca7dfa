/** The wire types: /openapi.json rendered by openapi-typescript, as committed in src/schema.ts. */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";
import { PACKAGE_DIR } from "./stack.js";

export const SCHEMA_FILE = join(PACKAGE_DIR, "src", "schema.ts");

/** The OpenAPI document a server at `baseUrl` serves. */
export async function fetchOpenApi(baseUrl: string): Promise<object> {
  const url = `${baseUrl.replace(/\/+$/, "")}/openapi.json`;
  const reply = await fetch(url);
  if (!reply.ok) throw new Error(`GET ${url} answered ${reply.status}`);
  return (await reply.json()) as object;
}

export function readOpenApi(path: string): object {
  return JSON.parse(readFileSync(path, "utf8")) as object;
}

/** The text of src/schema.ts for this document. */
export async function renderSchema(openapi: object): Promise<string> {
  const ast = await openapiTS(openapi as Parameters<typeof openapiTS>[0], { alphabetize: true, defaultNonNullable: false });
  return COMMENT_HEADER + astToString(ast);
}
