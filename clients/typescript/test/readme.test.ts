/** The README's example runs as written against a real server (only its URL changed). */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { it } from "node:test";
import { promisify } from "node:util";
import { PACKAGE_DIR } from "../tools/stack.js";
import { useStack } from "./support/fixture.js";

const stack = useStack();

it("the README's example runs", async () => {
  const readme = readFileSync(join(PACKAGE_DIR, "README.md"), "utf8");
  const example = /## Example\n\n```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(example, "README.md has an Example section with a ts block");
  assert.ok(example.includes('"http://127.0.0.1:8080"'));
  // inside the package, so that "hermes-redis" resolves to this build
  const script = join(PACKAGE_DIR, "build", "readme-example.mjs");
  writeFileSync(script, example.replace('"http://127.0.0.1:8080"', JSON.stringify(stack().url)));
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [script], { env: { ...process.env, HERMES_API_KEY: "" } });
    assert.match(stdout, /^\d+ of 8000 tokens\n/);
    assert.match(stdout, /\n1 user 帮我写一个 FastAPI 的用户认证接口 \d+\n/);
    assert.match(stdout, /\n4 assistant 好的：用 JWT，access token 30 min。 \d+\n/);
  } finally {
    rmSync(script, { force: true });
  }
});
