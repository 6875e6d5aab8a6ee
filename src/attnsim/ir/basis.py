"""Named directions of a residual stream ("tokens:a", "indices:3", "frac_prevs").

>>> b = Basis(["bos", "tokens:a"])
>>> b.add("x")
2
>>> b.index("tokens:a"), len(b)
(1, 3)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class Basis:
    """An ordered set of direction labels; the order is the residual stream's layout."""

    def __init__(self, labels: Iterable[str] = ()) -> None:
        self._labels: list[str] = []
        self._index: dict[str, int] = {}
        for label in labels:
            self.add(label)

    def add(self, label: str) -> int:
        """Adds ``label`` (if new) and returns its index."""
        i = self._index.get(label)
        if i is None:
            i = self._index[label] = len(self._labels)
            self._labels.append(label)
        return i

    def index(self, label: str) -> int:
        try:
            return self._index[label]
        except KeyError:
            raise KeyError(f"no residual direction {label!r}") from None

    def positions(self) -> Mapping[str, int]:
        """Every label's index, as one mapping (for reading many labels in a loop; the
        basis's own: read it, do not change it).

        >>> Basis(["bos", "x"]).positions()["x"]
        1
        """
        return self._index

    def __contains__(self, label: object) -> bool:
        return label in self._index

    def __len__(self) -> int:
        return len(self._labels)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self._labels)
