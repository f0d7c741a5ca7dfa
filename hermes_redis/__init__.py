"""hermes-redis: session memory for AI agents, hot in Redis, durable in SQLite."""

from hermes_redis.config import Config
from hermes_redis.errors import HermesError
from hermes_redis.models import Context, Message, SessionInfo
from hermes_redis.session_memory import SessionMemory

__all__ = ["Config", "Context", "HermesError", "Message", "SessionInfo", "SessionMemory"]
__version__ = "0.1.0"
