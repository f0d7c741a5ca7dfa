export { HermesClient, type HermesClientOptions } from "./client.js";
export {
  AuthError,
  ConflictError,
  ConnectionError,
  HermesError,
  type HermesErrorOptions,
  IncompatibleServerError,
  NotFoundError,
  ServerError,
  ValidationError,
} from "./errors.js";
export type { Fetch } from "./http.js";
export { newMessageId } from "./ids.js";
export type {
  AppendOptions,
  CompactResult,
  Context,
  Json,
  Memory,
  Message,
  NewMessage,
  Role,
  SearchHit,
  SessionInfo,
  SessionPage,
  SessionStatus,
} from "./types.js";
export type { components as WireSchemas, paths as WirePaths } from "./schema.js";
