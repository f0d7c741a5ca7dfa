"""``python -m workers [--config PATH] [--burst] [--metrics-port PORT] [-v]``: the worker that
archives and compacts sessions, the same as ``hermes-redis worker`` (both call
``hermes_redis.jobs.worker.run``). ``--help`` prints usage and exits without touching Redis;
a bad option is exit 2 with argparse's one-line message."""

from __future__ import annotations

import argparse
import logging
import sys

from hermes_redis.core.errors import HermesError

# Opened lazily (in main): --help and a usage error must not need the library's dependencies.


def parser() -> argparse.ArgumentParser:
    """The command line: every option of ``hermes-redis worker``, plus its ``--config`` and ``-v``."""
    p = argparse.ArgumentParser(
        prog="python -m workers",
        description="Run an RQ worker on the hermes queue: it archives new turns and compacts "
                    "sessions over their caps (redis backend only). Ctrl-C stops it.")
    p.add_argument("--config", metavar="PATH",
                   help="config file (default: $HERMES_CONFIG, else ./config.yml, else the defaults)")
    p.add_argument("--burst", action="store_true", help="sweep, drain the queue, then exit")
    p.add_argument("--metrics-port", type=port, default=0, metavar="PORT",
                   help="serve Prometheus metrics on 127.0.0.1:PORT/metrics (0: off)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log what the worker does (each job) to stderr")
    return p


def port(text: str) -> int:
    """A TCP port, 0–65535 (0: off)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port: use 0–65535")
    return value


def main(argv: list[str] | None = None) -> int:
    """Run the worker as ``argv`` says; the exit code (0: a burst finished or the worker was stopped)."""
    args = parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from hermes_redis.jobs.worker import run
    from hermes_redis.session_memory import SessionMemory

    try:
        mem = SessionMemory.from_config(args.config)
        try:
            if not mem.hot.needs_worker:
                print(f"Error: {mem.config.source}: the worker needs memory.session.backend: redis "
                      f"(it is {mem.hot.name}: appends flush in-process)", file=sys.stderr)
                return 2
            where = f"queue {mem.config.redis.queue!r} on {mem.hot.url}"
            if not args.burst:
                print(f"Worker listening on {where}; Ctrl-C stops it.", file=sys.stderr)
            if args.metrics_port:
                print(f"Metrics on http://127.0.0.1:{args.metrics_port}/metrics", file=sys.stderr)
            run(mem, burst=args.burst, metrics_port=args.metrics_port)
            if args.burst:
                print(f"Burst done: swept every session and drained {where}.")
        finally:
            mem.close()
    except HermesError as err:  # expected errors: one line, no traceback (invariant 7)
        print(f"Error: {' '.join(str(err).split())}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
