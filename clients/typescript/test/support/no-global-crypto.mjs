// Run with --no-experimental-global-webcrypto: Node 18 as it comes, with no global crypto.
if (globalThis.crypto !== undefined) throw new Error("crypto is still global");
const { newMessageId } = await import("hermes-redis");
console.log(await newMessageId());
