"""Plots: matplotlib without a display, and PNG files whose bytes depend only on the data.

Every figure of the pipeline (copy pre-training, SFT, critic and PPO curves, the report's charts)
is drawn on the Agg backend and saved without the `Software` metadata (the matplotlib version),
so the same data gives the same bytes on every machine that has the same matplotlib.
"""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any, Iterator, Mapping

from forgeline.provenance import atomic_path

PNG_METADATA = {"Software": None}


def pyplot(rc: Mapping[str, Any] | None = None):
    """matplotlib.pyplot on the Agg backend; `rc` (rcParams) is applied for the whole process."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if rc:
        plt.rcParams.update(rc)
    return plt


@contextlib.contextmanager
def figure(*args: Any, **kwargs: Any) -> Iterator[tuple[Any, Any]]:
    """(fig, axes) of `plt.subplots(*args, **kwargs)`; the figure is closed when the block ends."""
    plt = pyplot()
    fig, axes = plt.subplots(*args, **kwargs)
    try:
        yield fig, axes
    finally:
        plt.close(fig)


def png_bytes(fig, **savefig: Any) -> bytes:
    """The figure as PNG (`savefig` keywords, e.g. dpi, bbox_inches), without its metadata."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata=PNG_METADATA, **savefig)
    return buf.getvalue()


def save_png(fig, path: str | os.PathLike, **savefig: Any) -> Path:
    """Write the figure to `path` as PNG, atomically (a reader never sees half a file)."""
    data = png_bytes(fig, **savefig)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)
