/**
 * Failures that are not the caller's: no server, no answer, a page that is not JSON, a
 * server older than the client (a route it lacks, a reply without a field), a server whose
 * Redis is gone. Each is a typed HermesError with one clear line, never a TypeError.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { createServer } from "node:net";
import {
  AuthError,
  ConflictError,
  ConnectionError,
  HermesClient,
  HermesError,
  IncompatibleServerError,
  NotFoundError,
  ServerError,
  ValidationError,
} from "hermes-redis";
import { freePort } from "../tools/stack.js";
import { bentFetch, httpServer, replyBentFetch, useStack } from "./support/fixture.js";

const stack = useStack();

/** `promise` rejects with an instance of `cls`; the error, for more checks. */
async function failure<T extends HermesError>(promise: Promise<unknown>, cls: new (...args: never[]) => T): Promise<T> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof cls, `expected ${cls.name}, got ${String(err)}`);
    assert.ok(err instanceof HermesError);
    assert.equal(err.name, cls.name);
    if (cls === (HermesError as unknown)) assert.equal(Object.getPrototypeOf(err), HermesError.prototype, "no subclass");
    return err;
  }
  assert.fail(`expected ${cls.name}, but it resolved`);
}

describe("no answer", () => {
  it("a port nobody listens on is a ConnectionError saying where and what to check", async () => {
    const port = await freePort();
    const mem = new HermesClient({ baseUrl: `http://127.0.0.1:${port}/` });
    const err = await failure(mem.info("abc"), ConnectionError);
    assert.equal(err.code, "unreachable");
    assert.equal(err.status, undefined);
    assert.match(err.message, new RegExp(`cannot reach hermes-redis at http://127\\.0\\.0\\.1:${port} \\(ECONNREFUSED`));
    assert.match(err.message, /hermes-redis serve/);
    assert.ok(err.cause instanceof TypeError, "the fetch error is kept as the cause");
    assert.equal(await mem.ready(), false);
  });

  it("a server that never answers is a ConnectionError after the timeout", async () => {
    const silent = createServer(() => {}); // accepts, never answers
    await new Promise<void>((done) => silent.listen(0, "127.0.0.1", done));
    const port = (silent.address() as { port: number }).port;
    try {
      const mem = new HermesClient({ baseUrl: `http://127.0.0.1:${port}`, timeoutMs: 200 });
      const started = Date.now();
      const err = await failure(mem.info("abc"), ConnectionError);
      assert.equal(err.code, "timeout");
      assert.match(err.message, /no answer from hermes-redis at .* to GET \/v1\/sessions\/abc within 0\.2 s/);
      assert.ok(Date.now() - started < 5000);
    } finally {
      silent.close();
    }
  });
});

describe("not a hermes-redis answer", () => {
  it("a base URL that is not http(s) is refused when the client is made", () => {
    for (const baseUrl of ["127.0.0.1:8080", "not a url", "ftp://127.0.0.1/", ""]) {
      assert.throws(() => new HermesClient({ baseUrl }), (err: unknown) => {
        assert.ok(err instanceof ValidationError);
        assert.match(err.message, /is not an http\(s\) URL/);
        return true;
      });
    }
  });

  it("an HTML 502 page from a proxy is a ServerError naming the status and the content type", async () => {
    const page = await httpServer((_req, res) => {
      res.writeHead(502, { "content-type": "text/html" });
      res.end("<html><body>Bad Gateway</body></html>");
    });
    try {
      const err = await failure(new HermesClient({ baseUrl: page.url }).info("abc"), ServerError);
      assert.equal(err.status, 502);
      assert.match(err.message, /answered GET \/v1\/sessions\/abc with HTTP 502 and a text\/html body/);
    } finally {
      await page.close();
    }
  });

  it("another web server's 404 page, or a 200 that is not JSON, is an IncompatibleServerError", async () => {
    const other = await httpServer((req, res) => {
      if (req.url?.startsWith("/v1/sessions/abc")) {
        res.writeHead(200, { "content-type": "text/plain" });
        res.end("hello");
        return;
      }
      res.writeHead(404, { "content-type": "text/html" });
      res.end("<h1>Not Found</h1>");
    });
    try {
      const mem = new HermesClient({ baseUrl: other.url });
      const notFound = await failure(mem.createSession(), IncompatibleServerError);
      assert.equal(notFound.status, 404);
      assert.equal(notFound.code, "incompatible");
      assert.match(notFound.message, /HTTP 404 and a text\/html body: is that URL a hermes-redis server/);
      const plain = await failure(mem.info("abc"), IncompatibleServerError);
      assert.equal(plain.status, 200);
      assert.match(plain.message, /a text\/plain body, not JSON/);
    } finally {
      await other.close();
    }
  });
});

describe("error codes", () => {
  it("a code the client does not know is classed by its status; the server's code and message are kept", async () => {
    const answers: [number, string, new (...args: never[]) => HermesError][] = [
      [500, "internal", ServerError],
      [503, "brand_new_outage", ServerError],
      [409, "brand_new_conflict", ConflictError],
      [404, "brand_new_missing", NotFoundError],
      [403, "brand_new_refusal", AuthError],
      [422, "brand_new_invalid", ValidationError],
      [429, "rate_limited", HermesError],
      [421, "misdirected", AuthError], // the guard: a host name the server does not answer to
      [415, "unsupported_media_type", ValidationError],
    ];
    // each answer by the session id asked for: fetch itself repeats a request answered 421
    const server = await httpServer((req, res) => {
      const [status, code] = answers[Number(/\/v1\/sessions\/s(\d+)/.exec(req.url ?? "")?.[1])]!;
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { code, message: `said ${code}` } }));
    });
    try {
      const mem = new HermesClient({ baseUrl: server.url });
      for (const [i, [status, code, cls]] of answers.entries()) {
        const err = await failure(mem.info(`s${i}`), cls);
        assert.deepEqual([err.status, err.code, err.message], [status, code, `said ${code}`]);
      }
    } finally {
      await server.close();
    }
  });
});

describe("a server older than the client", () => {
  it("a route the server lacks (its real 404) is an IncompatibleServerError, not a NotFoundError", async () => {
    const mem = new HermesClient({
      baseUrl: stack().url,
      fetch: bentFetch((url, init) => [url.replace("/compact", "/compact-v9"), init]),
    });
    const sid = await mem.createSession();
    const err = await failure(mem.compact(sid), IncompatibleServerError);
    assert.equal(err.status, 404);
    assert.match(err.message, /has no route POST \/v1\/sessions\/\w+\/compact: the server is older than this client/);
  });

  it("a method the route lacks (405) is an IncompatibleServerError", async () => {
    const mem = new HermesClient({
      baseUrl: stack().url,
      fetch: bentFetch((url, init) => [url, init.method === "POST" && url.endsWith("/pop") ? { ...init, method: "PUT" } : init]),
    });
    const sid = await mem.createSession();
    const err = await failure(mem.pop(sid), IncompatibleServerError);
    assert.equal(err.status, 405);
  });

  it("a reply without a field the client reads names the field", async () => {
    const mem = new HermesClient({
      baseUrl: stack().url,
      fetch: replyBentFetch((data) => {
        delete data.token_count;
        return data;
      }),
    });
    const sid = await mem.createSession();
    const err = await failure(mem.append(sid, "user", "hi"), IncompatibleServerError);
    assert.match(err.message, /answered POST \/v1\/sessions\/\w+\/messages without the expected field 'token_count'/);
  });

  it("a nested field of the wrong type is named with its path", async () => {
    const mem = new HermesClient({
      baseUrl: stack().url,
      fetch: replyBentFetch((data) => {
        const messages = data.messages as Record<string, unknown>[] | undefined;
        if (messages?.[0]) messages[0].seq = "1";
        return data;
      }),
    });
    const sid = await mem.createSession();
    await mem.append(sid, "user", "hi");
    const err = await failure(mem.context(sid), IncompatibleServerError);
    assert.match(err.message, /field 'messages\[0\]\.seq' is missing or not a number/);
  });
});

describe("the server's own refusals", () => {
  it("a body that is not JSON (400 malformed_json) is a ValidationError", async () => {
    const mem = new HermesClient({ baseUrl: stack().url, fetch: bentFetch((url, init) => [url, { ...init, body: '{"role": "user", ' }]) });
    const sid = await new HermesClient({ baseUrl: stack().url }).createSession();
    const err = await failure(mem.append(sid, "user", "hi"), ValidationError);
    assert.equal(err.status, 400);
    assert.equal(err.code, "malformed_json");
  });

  it("Redis gone: 503 unavailable is a ServerError (after the append's tries)", async () => {
    const mem = new HermesClient({ baseUrl: stack().url, retryDelayMs: 10 });
    const sid = await mem.createSession();
    await stack().stopRedis();
    const err = await failure(mem.info(sid), ServerError);
    assert.equal(err.status, 503);
    assert.equal(err.code, "unavailable");
    const append = await failure(mem.append(sid, "user", "hi"), ServerError);
    assert.equal(append.status, 503);
    assert.equal(await mem.ready(), false);
  });
});
