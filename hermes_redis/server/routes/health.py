"""Operations: /healthz (the process answers), /readyz (Redis and the archive answer) and
/metrics (Prometheus text). No key needed: they say nothing about anyone's data, and no
address either (issue 35: the log has the reason /readyz is not ready)."""

import logging

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse, Response

from hermes_redis.core.errors import HermesError
from hermes_redis.server.errors import ApiError
from hermes_redis.server.metrics import Metrics
from hermes_redis.server.offload import Offload
from hermes_redis.server.routes.common import Routes
from hermes_redis.server.schemas import ErrorOut
from hermes_redis.session_memory import SessionMemory

log = logging.getLogger(__name__)


class HealthRoutes(Routes):
    def __init__(self, mem: SessionMemory, offload: Offload, metrics: Metrics) -> None:
        super().__init__(mem, offload)
        self.metrics = metrics

    def router(self) -> APIRouter:
        r = APIRouter(tags=["operations"])
        r.get("/healthz")(self.healthz)
        r.get("/readyz", responses={503: {"model": ErrorOut}})(self.readyz)
        r.get("/metrics", response_class=PlainTextResponse)(self.off(self.metrics_text))
        return r

    async def healthz(self) -> dict[str, str]:
        """The process answers: on the event loop, calling nothing, so it answers at once
        whatever Redis and the archive do (a liveness probe; see /readyz)."""
        return {"status": "ok"}

    async def readyz(self) -> dict[str, str]:
        """Redis and the archive both answer within ``server.backend_timeout``; else 503,
        naming neither address (the reason is logged)."""
        try:
            await self.offload(self.mem.ping)
        except (HermesError, ApiError) as err:
            log.warning("not ready: %s", err)
            raise ApiError(503, "unavailable", "not ready: Redis or the archive does not "
                           "answer; the server log says which") from None
        return {"status": "ready"}

    def metrics_text(self) -> Response:
        return Response(self.metrics.render(),
                        media_type="text/plain; version=0.0.4; charset=utf-8")
