"""The ranking model: a small, deterministic two-layer MLP in numpy.

score(entity) = sigmoid(w2 . relu((W1f^T slog(x_entity) + W1q^T q) / sqrt(F+Q) + b1) + b2)

``x_entity`` are the entity's F features, ``q`` the query embedding (Q floats),
``slog(x) = sign(x) * log1p(|x|)`` the usual squashing of raw counts and prices
(so scores spread over (0, 1) instead of saturating).
The weights are drawn once from a seeded generator for the largest supported
shapes (``MAX_FEATURES`` x ``HIDDEN`` and ``MAX_EMBEDDING`` x ``HIDDEN``); a
request with F features uses the first F rows, so any F up to the maximum is
scored by the same fixed weights, and the same inputs always give the same
scores (bit for bit, on one machine). Scoring is vectorized over entities: the
query term is computed once per request and broadcast.

``model_cost_ms`` stands in for a heavier model: after scoring, the calling
thread burns that much CPU time in a numpy loop, measured with
``time.thread_time()`` (CPU time of this thread only). Under contention the
wall time of a call therefore grows, as it would with a real CPU-bound model,
while the CPU it consumes stays the same. ``model_wait_ms`` stands in for a model
that waits instead (a remote feature store, an accelerator): the calling thread
sleeps that long per request, so the handler's wall time grows by a known amount
whatever the machine's load (the ground truth's per-message handler cost).
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

MAX_FEATURES = 1024
MAX_EMBEDDING = 256
HIDDEN = 64
DEFAULT_SEED = 20240611


class Model:
    def __init__(
        self, seed: int = DEFAULT_SEED, model_cost_ms: float = 0.0, model_wait_ms: float = 0.0
    ) -> None:
        if model_cost_ms < 0:
            raise ValueError(f"model_cost_ms must be >= 0, got {model_cost_ms}")
        if model_wait_ms < 0:
            raise ValueError(f"model_wait_ms must be >= 0, got {model_wait_ms}")
        self.seed = seed
        self.model_cost_ms = float(model_cost_ms)
        self.model_wait_ms = float(model_wait_ms)
        rng = np.random.default_rng(seed)
        self.w1_features = rng.standard_normal((MAX_FEATURES, HIDDEN), dtype=np.float32)
        self.w1_query = rng.standard_normal((MAX_EMBEDDING, HIDDEN), dtype=np.float32)
        self.b1 = rng.standard_normal(HIDDEN, dtype=np.float32) * np.float32(0.1)
        self.w2 = rng.standard_normal(HIDDEN, dtype=np.float32) / np.float32(np.sqrt(HIDDEN))
        self.b2 = np.float32(rng.standard_normal() * 0.1)
        for array in (self.w1_features, self.w1_query, self.b1, self.w2):
            array.setflags(write=False)
        digest = hashlib.sha256()
        for array in (self.w1_features, self.w1_query, self.b1, self.w2):
            digest.update(array.tobytes())
        self.version = f"mlp-{HIDDEN}h-{digest.hexdigest()[:12]}"

    def check_shapes(self, features: int, embedding: int) -> None:
        """Raise ValueError when a request's shapes exceed what the model supports."""
        if features > MAX_FEATURES:
            raise ValueError(f"{features} features per entity; the model supports {MAX_FEATURES}")
        if embedding > MAX_EMBEDDING:
            raise ValueError(
                f"query embedding of {embedding} floats; the model supports {MAX_EMBEDDING}"
            )

    def predict(
        self, features: np.ndarray, embedding: np.ndarray, cost_fraction: float = 1.0
    ) -> np.ndarray:
        """Score an (entities, F) matrix against a query embedding -> float32 (entities,).

        ``cost_fraction`` scales the ``model_cost_ms`` burn (1.0 = one request's cost).
        """
        x = np.asarray(features, dtype=np.float32)
        q = np.asarray(embedding, dtype=np.float32).reshape(-1)
        if x.ndim != 2:
            raise ValueError(f"features must be 2-D (entities, features), got shape {x.shape}")
        entities, width = x.shape
        self.check_shapes(width, q.shape[0])
        if entities == 0:
            scores = np.zeros(0, dtype=np.float32)
        else:
            scale = np.float32(1.0 / np.sqrt(max(width + q.shape[0], 1)))
            query_term = q @ self.w1_query[: q.shape[0]] if q.shape[0] else 0.0
            squashed = np.log1p(np.abs(x))
            squashed *= np.sign(x)
            hidden = squashed @ self.w1_features[:width]
            hidden += query_term
            hidden *= scale
            hidden += self.b1
            np.maximum(hidden, 0.0, out=hidden)
            logits = hidden @ self.w2 + self.b2
            scores = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32, copy=False)
        if self.model_cost_ms > 0 and cost_fraction > 0:
            burn_cpu(self.model_cost_ms * cost_fraction)
        if self.model_wait_ms > 0 and cost_fraction > 0:
            time.sleep(self.model_wait_ms * cost_fraction / 1000.0)
        return scores


def burn_cpu(milliseconds: float) -> int:
    """Spend ``milliseconds`` of this thread's CPU time in numpy work; return iterations."""
    if milliseconds <= 0:
        return 0
    deadline = time.thread_time() + milliseconds / 1000.0
    buffer = np.linspace(0.0, 1.0, 2048, dtype=np.float64)
    iterations = 0
    while time.thread_time() < deadline:
        np.sin(buffer, out=buffer)
        buffer += 0.5
        iterations += 1
    return iterations
