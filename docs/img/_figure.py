"""What every drawing script in docs/img shares: its command line."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def main(draw: Callable[[Path], Path], script: str, argv: list[str] | None = None) -> int:
    """``python docs/img/NAME.py [OUT]``: draws to OUT (default: NAME.png beside the script)."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else Path(script).with_suffix(".png")
    print(draw(out))
    return 0
