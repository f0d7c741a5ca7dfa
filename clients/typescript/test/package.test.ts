/** The package as published: zero runtime dependencies, the core free of Node-only and LangChain imports. */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { it } from "node:test";
import { PACKAGE_DIR } from "../tools/stack.js";

const dist = join(PACKAGE_DIR, "dist");

it("package.json has no runtime dependencies; @langchain/core is an optional peer", () => {
  const pkg = JSON.parse(readFileSync(join(PACKAGE_DIR, "package.json"), "utf8")) as Record<string, Record<string, unknown>>;
  assert.equal(pkg.dependencies, undefined);
  assert.ok(pkg.peerDependencies?.["@langchain/core"]);
  assert.deepEqual(pkg.peerDependenciesMeta?.["@langchain/core"], { optional: true });
});

it("the core modules import only each other (static imports), so browsers and bundlers take them as they are", () => {
  const core = readdirSync(dist).filter((f) => f.endsWith(".js") && f !== "langchain.js");
  assert.ok(core.includes("index.js") && core.includes("client.js"));
  for (const file of core) {
    const text = readFileSync(join(dist, file), "utf8");
    const imports = [...text.matchAll(/^\s*(?:import|export)\s[^;]*?from\s+"([^"]+)"/gm)].map((m) => m[1]!);
    for (const spec of imports) assert.match(spec, /^\.\/[a-z]+\.js$/, `${file} imports ${spec}`);
  }
});

it("the langchain entry imports @langchain/core and the core modules only", () => {
  const text = readFileSync(join(dist, "langchain.js"), "utf8");
  const imports = [...text.matchAll(/^\s*import\s[^;]*?from\s+"([^"]+)"/gm)].map((m) => m[1]!);
  assert.ok(imports.length > 0);
  for (const spec of imports) assert.match(spec, /^(@langchain\/core\/[a-z_]+|\.\/[a-z]+\.js)$/, spec);
});
