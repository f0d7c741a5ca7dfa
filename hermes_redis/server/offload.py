"""Library calls off the event loop, each waited for a bounded time (issue 35).

Every call that reaches Redis or the archive runs in this pool, never on the event loop: a
stalled Redis then holds one pool thread per request, not every request, and ``/healthz``
(which calls nothing) answers at once. A caller waits at most ``server.backend_timeout``
seconds and is answered 503 with ``Retry-After``; a call still waiting for a thread then is
dropped unrun, one already running finishes in the background (an append may still land:
retry it with its ``message_id``).
"""

import asyncio
import functools
import math
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from hermes_redis.server.errors import ApiError

P = ParamSpec("P")
T = TypeVar("T")
THREADS = 40  # as many as Starlette's own threadpool; a stall holds at most this many


class Offload:
    """A thread pool for library calls and the bounded wait for each (``timeout`` seconds)."""

    def __init__(self, timeout: float, threads: int = THREADS) -> None:
        self.timeout = timeout
        self.retry_after = max(1, math.ceil(timeout))
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="hermes-call")

    async def __call__(self, fn: Callable[..., T], *args: Any, extra: float = 0.0,
                       **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in the pool; 503 ``unavailable`` when it has not returned
        within ``timeout + extra`` seconds. Its own errors pass through unchanged."""
        future = asyncio.get_running_loop().run_in_executor(
            self.pool, functools.partial(fn, *args, **kwargs))
        try:
            return await asyncio.wait_for(future, self.timeout + extra)
        except TimeoutError:
            raise self.unavailable(self.timeout + extra) from None

    def unavailable(self, waited: float) -> ApiError:
        return ApiError(503, "unavailable", f"Redis or the archive did not answer within "
                        f"{waited:g} s (server.backend_timeout); retry in {self.retry_after} s "
                        "(a write may still complete: retry an append with the same message_id)")

    def route(self, fn: Callable[P, T], extra: float = 0.0) -> Callable[P, Awaitable[T]]:
        """``fn`` as an async endpoint run in the pool, with ``fn``'s signature (FastAPI reads
        its parameters through ``__wrapped__``)."""

        @functools.wraps(fn)
        async def offloaded(*args: P.args, **kwargs: P.kwargs) -> T:
            return await self(fn, *args, extra=extra, **kwargs)

        return offloaded

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
