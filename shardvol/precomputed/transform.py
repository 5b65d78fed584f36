"""The 3 x 4 affine transforms of mesh and skeleton infos: stored coordinates -> nanometres
(row-major, the last column the translation)."""

from __future__ import annotations

import numpy as np

IDENTITY = (1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0)


def apply(matrix: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``matrix`` (3, 4) applied to (N, 3) points, in float64."""
    return np.asarray(points, dtype=np.float64) @ matrix[:, :3].T + matrix[:, 3]


def invert(matrix: np.ndarray, what: str, error: type[Exception]) -> np.ndarray:
    """The (3, 4) inverse of ``matrix``; ``error("<what> is not invertible")`` if it has
    none."""
    try:
        inv = np.linalg.inv(matrix[:, :3])
    except np.linalg.LinAlgError:
        inv = np.full((3, 3), np.nan)
    if not np.isfinite(inv).all():
        raise error(f"{what} is not invertible")
    return np.concatenate([inv, -(inv @ matrix[:, 3])[:, None]], axis=1)
