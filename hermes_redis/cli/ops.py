"""The commands that run on the server's host: ``worker``, ``serve``, ``mcp``, ``doctor``
and ``server`` (the embedded Redis)."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hermes_redis.cli.render import plural
from hermes_redis.cli.state import State, emit_json, json_option, pass_state
from hermes_redis.core.config import Config
from hermes_redis.core.errors import ConfigError, ListenError
from hermes_redis.store import embedded

if TYPE_CHECKING:  # issue 43: --help imports no store
    from hermes_redis.session_memory import SessionMemory


@click.command()
@click.option("--burst", is_flag=True, help="Sweep, drain the queue, then exit.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=0, metavar="PORT",
              help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics (0: off).")
@pass_state
def worker(state: State, burst: bool, metrics_port: int) -> None:
    """Run an RQ worker that archives and compacts sessions (redis backend only)."""
    mem = state.local("worker")
    if not mem.hot.needs_worker:
        raise ConfigError(f"{mem.config.source}: the worker needs memory.session.backend: redis "
                          f"(it is {mem.hot.name}: appends flush in-process)")
    from hermes_redis.jobs.worker import run

    where = f"queue {mem.config.redis.queue!r} on {mem.hot.url}"
    if not burst:
        click.echo(f"Worker listening on {where}; Ctrl-C stops it.", err=True)
    if metrics_port:
        click.echo(f"Metrics on http://127.0.0.1:{metrics_port}/metrics", err=True)
    run(mem, burst=burst, metrics_port=metrics_port)
    if burst:
        click.echo(f"Burst done: swept every session and drained {where}.")


@click.command()
@json_option
@pass_state
def doctor(state: State, as_json: bool) -> None:
    """Is this deployment safe? One line per check, a fix for each; exit 1 on any failure."""
    from hermes_redis.cli import doctor as doctor_mod

    state.refuse_remote("doctor runs")
    checks = doctor_mod.run(state.config())
    if as_json:
        emit_json({"ok": not doctor_mod.failed(checks), "checks": [c.as_dict() for c in checks]})
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            fix = f" -> {c.fix}" if c.fix and c.status != doctor_mod.OK else ""
            click.echo(f"{c.status.upper():<4}  {c.name:<{width}}  {c.detail}{fix}")
    if doctor_mod.failed(checks):
        sys.exit(1)


@click.command()
@click.option("--user", "user_id", metavar="U",
              help="Scope the tools to this user's sessions and memories (default: all).")
@pass_state
def mcp(state: State, user_id: str | None) -> None:
    """Serve the MCP tools (append, context, remember, recall, info, forget…) over stdio."""
    try:
        from hermes_redis.server.mcp import serve_stdio
    except ImportError:
        raise ConfigError("`hermes-redis mcp` needs the mcp extra: "
                          "pip install 'hermes-redis[mcp]'") from None
    serve_stdio(state.local("hermes-redis mcp"), user_id)


@click.group()
def server() -> None:
    """The embedded Redis started when no redis.url is configured."""


@server.command()
@pass_state
def start(state: State) -> None:
    """Start the embedded Redis now (the first process that needs it would)."""
    config = state.config()
    if config.redis.url:
        raise ConfigError(f"{config.source}: redis.url is configured, so the embedded Redis is "
                          "not used: start the Redis at redis.url instead")
    sock = embedded.socket_path(config.data_dir)
    if embedded.alive(sock):
        click.echo(f"The embedded Redis under {config.data_dir} already runs (socket {sock}).")
        return
    embedded.ensure_running(config.data_dir)
    click.echo(f"Started the embedded Redis under {config.data_dir} (socket {sock}); "
               "`hermes-redis server stop` stops it.")


@server.command()
@json_option
@pass_state
def status(state: State, as_json: bool) -> None:
    """Whether the embedded Redis runs: its pid, port, socket and data directory."""
    config = state.config()
    found = embedded.status(config.data_dir)
    found["in_use"] = not config.redis.url and config.session.backend == "redis"
    if as_json:
        emit_json(found)
        return
    if found["running"]:
        port = found["port"] or "none (unix socket only)"
        click.echo(f"The embedded Redis runs: pid {found['pid']}, Redis {found['version']}, "
                   f"port {port}, socket {found['socket']}, data in {found['data_dir']} "
                   f"(log {found['log']}); `hermes-redis server stop` stops it.")
    else:
        click.echo(f"The embedded Redis under {found['data_dir']} is not running; "
                   "`hermes-redis server start` starts it (so does the first command that "
                   "needs it).")
    if config.redis.url:
        click.echo("Note: redis.url is configured, so the embedded Redis is not in use.")


@server.command()
@pass_state
def stop(state: State) -> None:
    """Shut the embedded Redis down, saving its data."""
    config = state.config()
    if embedded.stop(config.data_dir):
        click.echo(f"Stopped the embedded Redis under {config.data_dir}.")
    else:
        click.echo(f"The embedded Redis under {config.data_dir} is not running.")
    if config.redis.url:
        click.echo("Note: redis.url is configured, so the embedded Redis is not in use.")


@click.command()
@click.option("--host", metavar="H", help="Interface to listen on (default: server.host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(1, 65535), help="Port (default: server.port, 8080).")
@click.option("--workers", type=click.IntRange(min=1),
              help="Worker processes (default: one per core; 1 on the in-process backend).")
@click.option("--access-log", is_flag=True, help="Log every request line (never headers or keys).")
@pass_state
def serve(state: State, host: str | None, port: int | None, workers: int | None,
          access_log: bool) -> None:
    """The HTTP API: /v1 routes, the console at /ui, OpenAPI at /openapi.json, docs at /docs,
    /metrics."""
    import uvicorn

    from hermes_redis.server.app import create_app

    mem = state.local("serve")  # connects now: a bad Redis or archive is one line, not a traceback
    config = mem.config
    host, port = host or config.server.host, port or config.server.port
    workers = workers or config.server.workers or default_workers(mem)
    active = _keys_for(mem, host, workers)
    check_port(host, port)  # before "Serving": a taken port is one line, not uvicorn's traceback
    os.environ.update(HERMES_SERVER_HOST=host, HERMES_SERVER_PORT=str(port),
                      HERMES_SERVER_WORKERS=str(workers))
    if state.config_path:
        os.environ["HERMES_CONFIG"] = str(Path(state.config_path).resolve())
    auth = (f"{plural(active, 'API key')} active: /v1 needs Authorization: Bearer" if active else
            "no API keys: serving without auth, on loopback only "
            "(`hermes-redis key create` turns auth on)")
    click.echo(f"Serving hermes-redis on http://{host}:{port} ({plural(workers, 'worker')}); "
               f"{auth}. The console at http://{host}:{port}/ui/, API docs at /docs.", err=True)
    options = _connection_options(config)
    if workers == 1:
        app = create_app(config.with_overrides(server={"host": host, "port": port}), mem=mem)
        uvicorn.run(app, host=host, port=port, access_log=access_log, log_level="info", **options)
        return
    state.close()
    _serve_processes(host, port, workers, access_log, options)


def _connection_options(config: Config) -> dict[str, Any]:
    """uvicorn's connection limits (issue 35): idle keep-alive connections closed after
    server.keep_alive_timeout, a request head due within server.header_timeout of its first
    byte and at most 64 KB (hermes_redis.server.protocol)."""
    from hermes_redis.server import protocol

    os.environ[protocol.HEADER_TIMEOUT_ENV] = str(config.server.header_timeout)
    return {"http": protocol.PROTOCOL, "timeout_keep_alive": config.server.keep_alive_timeout,
            "h11_max_incomplete_event_size": protocol.MAX_HEAD_BYTES}


def default_workers(mem: SessionMemory) -> int:
    """One worker process per core on a shared (Redis) backend; 1 on the in-process one,
    whose sessions live inside one process."""
    return max(1, os.cpu_count() or 1) if mem.hot.needs_worker else 1


def _keys_for(mem: SessionMemory, host: str, workers: int) -> int:
    """How many API keys are active; a ConfigError for what must not be served: several
    processes over the in-process backend, or no keys on a non-loopback interface."""
    from hermes_redis.server.guard import loopback_name

    config = mem.config
    if workers > 1 and not mem.hot.needs_worker:
        raise ConfigError(f"{config.source}: --workers {workers} needs memory.session.backend: redis "
                          f"(the {mem.hot.name} backend keeps sessions inside one process); "
                          "use --workers 1")
    from hermes_redis.store.api_keys import KeyStore

    active = KeyStore(mem.cold).active()
    if active == 0 and not loopback_name(host):
        raise ConfigError(f"refusing to listen on {host} with no API keys: anyone could read every "
                          "session. Create one with `hermes-redis key create --user U` (or --admin), "
                          "or listen on 127.0.0.1")
    return active


def check_port(host: str, port: int) -> None:
    """A ListenError unless ``host:port`` can be bound now, tried as uvicorn binds it (IPv6 for
    a host with a colon, SO_REUSEADDR on), so a port in use is refused before anything starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise ListenError(f"port {port} on {host} is in use by another process; pick "
                                  "another with --port") from None
            reason = err.strerror or str(err)
            raise ListenError(f"cannot listen on {host} port {port} ({reason}); pick another "
                              "port with --port, or another interface with --host") from None


def _serve_processes(host: str, port: int, workers: int, access_log: bool,
                     options: dict[str, Any]) -> None:
    """``workers`` uvicorn processes, each building its app from the environment; their
    Prometheus files in a directory of their own unless one is given."""
    import uvicorn

    from hermes_redis.server.app import app_from_env

    made = None if os.environ.get("PROMETHEUS_MULTIPROC_DIR") else tempfile.mkdtemp(prefix="hermes-metrics-")
    if made:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = made
    try:
        uvicorn.run(f"{app_from_env.__module__}:{app_from_env.__name__}", factory=True, host=host,
                    port=port, workers=workers, access_log=access_log, log_level="info",
                    **options)
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)
