/**
 * API keys against a real server whose keys were made with `hermes-redis key create`: a user
 * key sees its user's data only (another user's ids answer 404, naming another user 403), an
 * admin key sees all, and no key or a wrong one is an AuthError.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { AuthError, HermesClient, NotFoundError, ValidationError } from "hermes-redis";
import { useStack } from "./support/fixture.js";

const stack = useStack({ keys: { alice: { user: "alice" }, bob: { user: "bob" }, admin: {} } });
const as = (key: string | undefined) => new HermesClient({ baseUrl: stack().url, apiKey: key });
const alice = () => as(stack().keys.alice);
const bob = () => as(stack().keys.bob);
const admin = () => as(stack().keys.admin);

describe("API keys", () => {
  it("no key is an AuthError (401 unauthorized) once keys exist", async () => {
    await assert.rejects(as(undefined).listSessions(), (err: unknown) => {
      assert.ok(err instanceof AuthError);
      assert.equal(err.status, 401);
      assert.equal(err.code, "unauthorized");
      assert.match(err.message, /missing API key/);
      return true;
    });
  });

  it("a wrong key is an AuthError, and the message does not echo it", async () => {
    const wrong = "hrk_000000000000_not-a-real-key-at-all";
    await assert.rejects(as(wrong).createSession(), (err: unknown) => {
      assert.ok(err instanceof AuthError);
      assert.equal(err.status, 401);
      assert.ok(!err.message.includes(wrong));
      return true;
    });
  });

  it("a user key acts for its user: sessions and memories default to it", async () => {
    const sid = await alice().createSession({ title: "alice's" });
    assert.equal((await alice().info(sid)).userId, "alice");
    const memoryId = await alice().remember("alice likes tea");
    assert.deepEqual((await alice().memories()).map((m) => [m.memoryId, m.userId]), [[memoryId, "alice"]]);
    assert.deepEqual(await bob().memories(), []);
  });

  it("naming another user with a user key is an AuthError (403 forbidden)", async () => {
    await assert.rejects(alice().createSession({ userId: "bob" }), (err: unknown) => {
      assert.ok(err instanceof AuthError);
      assert.equal(err.status, 403);
      assert.equal(err.code, "forbidden");
      return true;
    });
    await assert.rejects(alice().memories({ userId: "bob" }), AuthError);
  });

  it("another user's session answers exactly as an unknown one: NotFoundError", async () => {
    const sid = await alice().createSession();
    await alice().append(sid, "user", "a secret plan with quokkas");
    const other = await bob().info(sid).then(
      () => assert.fail("bob saw alice's session"),
      (err: unknown) => err,
    );
    assert.ok(other instanceof NotFoundError);
    const unknown = await bob().info("f".repeat(32)).then(
      () => assert.fail("an unknown id was found"),
      (err: unknown) => err,
    );
    assert.ok(unknown instanceof NotFoundError);
    assert.equal(other.message.replace(sid, "ID"), unknown.message.replace("f".repeat(32), "ID"));
    await assert.rejects(bob().append(sid, "user", "mine now"), NotFoundError);
    await assert.rejects(bob().context(sid), NotFoundError);
    assert.deepEqual(await bob().search("quokkas"), []);
    assert.equal((await alice().search("quokkas")).length, 1);
    assert.ok(!(await bob().listSessions({ status: "all" })).sessions.some((s) => s.sessionId === sid));
  });

  it("an admin key sees every user, and must say whose memory it adds or reads", async () => {
    const a = await alice().createSession({ title: "for the admin" });
    const b = await bob().createSession();
    assert.equal((await admin().info(a)).userId, "alice");
    const listed = (await admin().listSessions({ status: "all", limit: 100 })).sessions.map((s) => s.sessionId);
    assert.ok(listed.includes(a) && listed.includes(b));
    assert.deepEqual((await admin().listSessions({ userId: "bob", status: "all" })).sessions.map((s) => s.userId), ["bob"]);
    await assert.rejects(admin().remember("whose?"), ValidationError);
    await admin().remember("bob prefers dark mode", { userId: "bob" });
    assert.deepEqual((await bob().memories()).map((m) => m.content), ["bob prefers dark mode"]);
    await admin().delete(b);
    assert.equal((await bob().info(b)).status, "deleted");
  });
});
