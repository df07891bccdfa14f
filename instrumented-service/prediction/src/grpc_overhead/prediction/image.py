"""Image-like payloads: opaque encoded bytes scored as one entity.

The REST-vs-gRPC question is asked for images (0.23 / 0.87 / 2.3 MB in the
source): big binary blobs that no codec shrinks, where JSON needs base64 and
protobuf carries bytes as they are. ``make_image`` draws incompressible bytes
(a JPEG's entropy-coded body is close to random) behind a JPEG start-of-image
marker; the server turns the bytes into ``IMAGE_FEATURES`` features (a
normalized histogram of the byte values, one pass over the data, so the
model's work grows with the image like a real decoder's would) and scores them
as one entity.
"""

from __future__ import annotations

import numpy as np

IMAGE_FEATURES = 32
JPEG_MAGIC = b"\xff\xd8\xff\xe0"
MAX_IMAGE_BYTES = 64 * 1024 * 1024


def make_image(rng: np.random.Generator, size: int) -> bytes:
    """``size`` bytes that look like a JPEG to a codec: a marker, then noise."""
    if not 0 < size <= MAX_IMAGE_BYTES:
        raise ValueError(f"image size must be 1..{MAX_IMAGE_BYTES} bytes, got {size}")
    body = rng.integers(0, 256, size=max(0, size - len(JPEG_MAGIC)), dtype=np.uint8).tobytes()
    return (JPEG_MAGIC + body)[:size]


def image_features(data: bytes) -> np.ndarray:
    """A (1, IMAGE_FEATURES) float32 matrix: the byte-value histogram, normalized."""
    if not data:
        raise ValueError("empty image: no bytes to score")
    if len(data) > MAX_IMAGE_BYTES:
        raise ValueError(f"image of {len(data)} bytes; at most {MAX_IMAGE_BYTES}")
    values = np.frombuffer(data, dtype=np.uint8)
    counts = np.bincount(values >> 3, minlength=IMAGE_FEATURES).astype(np.float32)
    return (counts / np.float32(values.size)).reshape(1, IMAGE_FEATURES)
