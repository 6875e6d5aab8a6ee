"""What every drawing script in docs/img shares: saving a figure and the command line."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def save(fig, path: Path, dpi: int, description: str | None = None) -> Path:
    """Writes ``fig`` to ``path`` (folders made) without a timestamp or software tag, so
    that the same drawing gives the same bytes, and closes it."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    meta = (
        {"Software": None}
        if description is None
        else {"Software": None, "Description": description}
    )
    fig.savefig(path, dpi=dpi, metadata=meta)
    plt.close(fig)
    return path


def main(draw: Callable[[Path], Path], script: str, argv: list[str] | None = None) -> int:
    """``python docs/img/NAME.py [OUT]``: draws to OUT (default: NAME.png beside the script)."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else Path(script).with_suffix(".png")
    print(draw(out))
    return 0
