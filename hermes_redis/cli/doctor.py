"""``hermes-redis doctor``: is this deployment safe? One check per concern, each with a fix.

The doctor never starts anything and never writes data: it reads the Redis, the archive
and the RQ registries the config points at, and reports. A check fails when acknowledged
turns are at risk or nothing archives them; it warns when an operator should look.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import redis

from hermes_redis.core.config import Config
from hermes_redis.core.errors import BackendUnavailableError, ConfigError, HermesError
from hermes_redis.core.urls import redact_url
from hermes_redis.store import embedded
from hermes_redis.store.archive import SCHEMA_VERSION
from hermes_redis.store.connection import redis_safety, url_origin
from hermes_redis.store.hot import ClusterHot, RedisHot
from hermes_redis.store.open import connect_hot, open_queue

OK, WARN, FAIL = "ok", "warn", "fail"
BACKLOG_AGE_WARN = 300.0  # seconds: a healthy worker archives within seconds


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def run(config: Config) -> list[Check]:
    """Every check, in the order an operator would read them. Whatever the Redis (configured
    or embedded, running or not), a Redis backend gets a ``workers`` verdict: no worker is
    a failure, also when none can run because its Redis is down."""
    embedded_used = config.session.backend != "memory" and not config.redis.url
    checks: list[Check] = [embedded_check(config)] if embedded_used else []
    hot = _hot(config, checks)
    checks.append(archive_check(config))
    if hot is not None:
        try:
            checks += worker_checks(config, hot)
        finally:
            hot.close()
    elif config.session.backend != "memory":
        checks.append(_no_redis_no_worker(config))
    if config.embeddings.provider != "none":
        checks.append(embeddings_check(config))
    return checks


def embeddings_check(config: Config) -> Check:
    """The embedding provider answers one text with a vector (issue 31). A failing one only
    warns: archiving goes on and recall is by words until the vectors are filled in."""
    from hermes_redis.core.embeddings import open_embedder

    try:
        embedder = open_embedder(config.embeddings)
    except ConfigError as err:
        return Check("embeddings", FAIL, str(err), "fix the embeddings block of the config")
    assert embedder is not None
    started = time.perf_counter()
    try:
        embedder.embed(["hermes-redis doctor"])
    except HermesError as err:
        return Check("embeddings", WARN, f"{err}; messages are archived without vectors and "
                     "recall is by words until it answers", "check embeddings.base_url, "
                     "embeddings.model and the key in $" + config.embeddings.api_key_env)
    return Check("embeddings", OK, f"{embedder.name}: {embedder.dim} dimensions, one text in "
                 f"{(time.perf_counter() - started) * 1e3:.0f} ms")


def failed(checks: list[Check]) -> bool:
    return any(c.status == FAIL for c in checks)


def embedded_check(config: Config) -> Check:
    sock = embedded.socket_path(config.data_dir)
    if embedded.alive(sock):
        pid = (config.data_dir / "redis.pid")
        who = f"pid {pid.read_text().strip()}, " if pid.exists() else ""
        return Check("embedded", OK, f"the embedded Redis runs ({who}socket {sock})")
    return Check("embedded", WARN, f"the embedded Redis under {config.data_dir} is stopped "
                 "(the first process that needs it starts it)",
                 "start it now: `hermes-redis server start`")


def _no_redis_no_worker(config: Config) -> Check:
    """The workers' verdict when their Redis cannot be asked: none serves the queue."""
    name = config.redis.queue
    if not config.redis.url and not embedded.alive(embedded.socket_path(config.data_dir)):
        return Check("workers", FAIL, f"no worker serves queue {name!r}: the embedded Redis it "
                     "lives on is stopped, so nothing archives or compacts new turns",
                     "start one: `hermes-redis worker` (it starts the embedded Redis too)")
    return Check("workers", FAIL, f"no worker can serve queue {name!r} while its Redis cannot "
                 "be reached: nothing archives or compacts new turns",
                 "bring Redis back (the redis check above), then start one: "
                 "`hermes-redis worker`")


def _redis_fix(config: Config, queue: bool = False) -> str:
    """What to do about a Redis that does not answer: the configured one, or the embedded."""
    if queue and config.redis.queue_url:
        return "start the queue's Redis or fix redis.queue_url / HERMES_REDIS_QUEUE_URL"
    if config.redis.url:
        return f"start Redis or fix {url_origin(config)}"
    return (f"see {config.data_dir / 'redis.log'}; restart it: `hermes-redis server stop`, "
            "then `hermes-redis server start`")


def _hot(config: Config, checks: list[Check]) -> RedisHot | None:
    """Reach the hot tier and append its checks; None when there is nothing more to ask it."""
    if config.session.backend == "memory":
        checks.append(Check("redis", WARN, "memory backend: sessions live in one process and are "
                            "lost when it exits", "set memory.session.backend: redis"))
        return None
    if config.redis.url:
        url = config.redis.url
    else:
        sock = embedded.socket_path(config.data_dir)
        if not embedded.alive(sock):
            return None
        url = f"unix://{sock}"
    try:
        hot = connect_hot(config, url)
    except ConfigError as err:
        checks.append(Check("redis", FAIL, str(err), "fix redis.url"))
        return None
    except BackendUnavailableError as err:  # a cluster's nodes, asked for its layout
        checks.append(_cluster_unreachable(url, err))
        return None
    if isinstance(hot, ClusterHot):
        return _cluster(config, hot, url, checks)
    try:
        info, memory = hot.client.info("server"), hot.client.info("memory")
    except redis.exceptions.InvalidResponse:
        hot.close()
        checks.append(Check("redis", FAIL, f"{redact_url(url)} answered but is not a Redis "
                            "server", f"check {url_origin(config)}"))
        return None
    except redis.RedisError as err:
        hot.close()
        checks.append(Check("redis", FAIL, f"cannot reach Redis at {redact_url(url)} ({err})",
                            _redis_fix(config)))
        return None
    _node_checks(config, hot.client, f"Redis {info.get('redis_version', '?')} at "
                 f"{redact_url(url)}", memory, checks)
    return hot


def _cluster(config: Config, hot: ClusterHot, url: str, checks: list[Check]) -> ClusterHot | None:
    """A Redis Cluster: the safety and memory checks on every primary."""
    try:
        for name, node, _slot in hot.primaries():
            info = node.info("server")
            where = (f"Redis {info.get('redis_version', '?')} at {name} "
                     f"(cluster {redact_url(url)})")
            _node_checks(config, node, where, node.info("memory"), checks)
    except (HermesError, redis.RedisError) as err:
        hot.close()
        checks.append(_cluster_unreachable(url, err))
        return None
    return hot


def _cluster_unreachable(url: str, err: BaseException) -> Check:
    return Check("redis", FAIL, f"cannot check the Redis Cluster at {redact_url(url)} "
                 f"({_first(err)})", "start its nodes or fix redis.url")


def _first(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _node_checks(config: Config, client: redis.Redis, where: str, memory: dict[str, Any],
                 checks: list[Check]) -> None:
    for status, detail, fix in redis_safety(client, config):
        checks.append(Check("redis", status, f"{where}: {detail}", fix))
    used, limit = int(memory.get("used_memory", 0)), int(memory.get("maxmemory", 0))
    share = config.redis.memory_warn
    if limit and used >= share * limit:
        checks.append(Check("memory", WARN, f"Redis uses {used / limit:.0%} of maxmemory "
                            f"({_mib(used)} of {_mib(limit)})",
                            "start more workers to drain the backlog, or raise maxmemory"))
    else:
        of = f" of {_mib(limit)} maxmemory" if limit else " (no maxmemory limit)"
        checks.append(Check("memory", OK, f"Redis uses {_mib(used)}{of}"))


def archive_check(config: Config) -> Check:
    if config.archive.url:
        return postgres_check(config.archive.url)
    path = config.archive_path
    if not path.exists():
        return Check("archive", WARN, f"archive {path} does not exist yet",
                     "it is created by the first flush; check archive.path if you expected one")
    try:
        db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=5)
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            integrity = db.execute("PRAGMA quick_check").fetchone()[0]
            db.execute("BEGIN IMMEDIATE")  # writable: take the write lock, write nothing
            db.execute("ROLLBACK")
        finally:
            db.close()
    except sqlite3.Error as err:
        return Check("archive", FAIL, f"archive {path} is not usable ({err})",
                     "check the file's permissions and the disk; restore it from a backup "
                     "if it is corrupted")
    if integrity != "ok":
        return Check("archive", FAIL, f"archive {path} fails its integrity check ({integrity})",
                     "restore it from a backup; the hot tier keeps turns not yet archived")
    if version > SCHEMA_VERSION:
        return Check("archive", FAIL, f"archive {path} has schema version {version}, newer than "
                     f"this hermes-redis ({SCHEMA_VERSION})", "upgrade hermes-redis")
    return Check("archive", OK, f"archive {path}: writable, integrity ok, schema version "
                 f"{version or SCHEMA_VERSION}")


def postgres_check(url: str) -> Check:
    """A PostgreSQL archive: reachable, its schema version known, its tables writable."""
    where = redact_url(url)
    try:
        from hermes_redis.store.archive import postgres as archive_pg
    except ImportError as err:
        return Check("archive", FAIL, f"archive.url is set but the PostgreSQL driver is missing "
                     f"({err.name})", "pip install 'hermes-redis[postgres]'")
    try:
        server, version, writable = archive_pg.probe(url)
    except HermesError as err:
        return Check("archive", FAIL, str(err), "start PostgreSQL or fix archive.url / "
                     "HERMES_ARCHIVE_URL (host, port, user, password, database)")
    if version > archive_pg.SCHEMA_VERSION:
        return Check("archive", FAIL, f"archive {where} has schema version {version}, newer than "
                     f"this hermes-redis ({archive_pg.SCHEMA_VERSION})", "upgrade hermes-redis")
    if not version:
        return Check("archive", WARN, f"archive {where} (PostgreSQL {server}) has no hermes "
                     "tables yet", "they are created on first use; check archive.url if you "
                     "expected some")
    if not writable:
        return Check("archive", FAIL, f"archive {where}: this user may not write its tables",
                     "GRANT INSERT, UPDATE, DELETE on the archive's tables to it")
    upgrade = (f" (upgraded to {archive_pg.SCHEMA_VERSION} on first use)"
               if version < archive_pg.SCHEMA_VERSION else "")
    return Check("archive", OK, f"archive {where} (PostgreSQL {server}): writable, schema "
                 f"version {version}{upgrade}")


def worker_checks(config: Config, hot: RedisHot) -> list[Check]:
    """The workers, the backlog and the jobs; RQ's registries live on ``redis.queue_url``
    when it is set (always with a cluster), the backlog on the hot tier."""
    name = config.redis.queue
    if isinstance(hot, ClusterHot) and not config.redis.queue_url:
        return [Check("workers", FAIL, "the hot tier is a Redis Cluster and RQ cannot queue on "
                      "one", "set redis.queue_url to a plain Redis")]
    queue = open_queue(config, hot)
    assert queue is not None  # a Redis hot tier always has one

    def workers() -> Check:
        alive = queue.workers()
        if not alive:
            return Check("workers", FAIL, f"no worker serves queue {name!r}: nothing archives or "
                         "compacts new turns", "start one: `hermes-redis worker`")
        return Check("workers", OK, f"{len(alive)} worker(s) on queue {name!r}")

    def backlog() -> Check:
        size, oldest = hot.backlog_summary()
        if not size:
            return Check("backlog", OK, "every turn is archived")
        age = max(0.0, time.time() - oldest)
        text = f"{size} session(s) hold unarchived turns; the oldest waits {age:.0f}s"
        if age > BACKLOG_AGE_WARN:
            return Check("backlog", WARN, text, "check the workers' logs; `hermes-redis worker "
                         "--burst` drains it now")
        return Check("backlog", OK, text)

    def failures() -> Check:
        count = queue.failed_count()
        if count:
            return Check("jobs", WARN, f"{count} failed job(s) on queue {name!r}",
                         f"see them with `rq info -u URL {name}`; the sweep retries their sessions")
        return Check("jobs", OK, f"no failed jobs; {queue.queued()} queued")

    try:
        return [_probe(config, p, on_queue) for p, on_queue in
                ((workers, True), (backlog, False), (failures, True))]
    finally:
        queue.close()


def _probe(config: Config, probe: Callable[[], Check], on_queue: bool) -> Check:
    """One check; what Redis refuses is that check's failure, not the doctor's. ``on_queue``:
    it reads RQ's keys (on ``redis.queue_url`` when set), else the hot tier."""
    try:
        return probe()
    except (redis.ConnectionError, redis.TimeoutError) as err:
        return Check(probe.__name__, FAIL, f"could not read it from Redis ({err})",
                     _redis_fix(config, queue=on_queue))
    except redis.RedisError as err:
        return Check(probe.__name__, FAIL, f"could not read it from Redis ({err})",
                     "check the ACL user's permissions")
    except HermesError as err:
        return Check(probe.__name__, FAIL, str(err), _redis_fix(config, queue=on_queue))


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
