"""docs/simulator.md cannot go stale silently on U's two sequence layouts.

Its picture (drawn by docs/img/layouts.py from the layout classes) draws, the same bytes on
every run, and the committed PNG carries the text of what the current layout code gives;
the page embeds it, and its table of sequence lengths and its growth laws say what
:class:`~attnsim.simulator.layout.Layout` and
:class:`~attnsim.simulator.vector_layout.VectorLayout` compute. Regenerate the picture with
``python docs/img/layouts.py`` when a test here fails.
"""

from __future__ import annotations

import importlib.util
import re
import struct
import zlib
from pathlib import Path

import pytest

from attnsim.simulator.layout import Layout
from attnsim.simulator.vector_layout import VectorLayout
from tests.figures import run_script

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "simulator.md"
SCRIPT = ROOT / "docs" / "img" / "layouts.py"
PICTURE = ROOT / "docs" / "img" / "layouts.png"
TABLE_HEADER = (
    "| build (N, D, H, F) | layers | scalar length | vector length | vector token width |"
)


def _script():
    spec = importlib.util.spec_from_file_location("docs_img_layouts", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png_text(data: bytes) -> dict[str, str]:
    """The text chunks (tEXt, zTXt, iTXt) of a PNG, keyword -> text."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    out, pos = {}, 8
    while pos < len(data):
        (size,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + size]
        pos += 12 + size
        if kind == b"tEXt":
            key, text = body.split(b"\0", 1)
            out[key.decode("latin-1")] = text.decode("latin-1")
        elif kind == b"zTXt":
            key, rest = body.split(b"\0", 1)
            out[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        elif kind == b"iTXt":
            key, rest = body.split(b"\0", 1)
            compressed, rest = rest[0], rest[2:]
            _, rest = rest.split(b"\0", 1)  # language tag
            _, text = rest.split(b"\0", 1)  # translated keyword
            out[key.decode("latin-1")] = (zlib.decompress(text) if compressed else text).decode()
    return out


def test_the_drawing_script_writes_a_png(tmp_path):
    _, size = run_script(SCRIPT, tmp_path / "layouts.png")
    script = _script()
    assert size == (script.WIDTH, script.HEIGHT)


def test_the_picture_is_the_same_bytes_on_every_run(tmp_path):
    script = _script()
    first = script.draw(tmp_path / "a.png").read_bytes()
    second = script.draw(tmp_path / "b.png").read_bytes()
    assert first == second


def test_the_committed_picture_shows_the_current_layouts():
    text = _png_text(PICTURE.read_bytes())
    assert text.get("Description") == _script().describe(), (
        "docs/img/layouts.png is stale: run `python docs/img/layouts.py` and commit the result"
    )


def test_the_description_follows_the_layout_code():
    script = _script()
    N, D, H, F = script.BUILD
    scalar, vector = Layout(N, D, H, F), VectorLayout(N, D, H, F)
    text = script.describe()
    assert f"scalar: {scalar.length} positions x 1 number" in text
    assert f"vector: {vector.length} positions x {vector.width} channels" in text
    for name, start, size, _ in vector.regions():
        assert f"  {name} {start} {size}" in text
    for name in scalar.input_roles:
        assert f"  {name} {scalar.starts[name]} {scalar.sizes[name]}\n" in text


def test_the_page_shows_the_picture():
    assert "](img/layouts.png)" in PAGE.read_text()
    assert PICTURE.is_file()


def _table() -> list[list[str]]:
    lines = PAGE.read_text().splitlines()
    start = lines.index(TABLE_HEADER)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_the_page_table_has_rows():
    assert len(_table()) >= 3


@pytest.mark.parametrize("row", _table(), ids=lambda r: f"{r[0]}x{r[1]}")
def test_the_page_table_is_what_the_layouts_compute(row):
    build, layers, scalar, vector, width = row
    N, D, H, F = (int(v) for v in re.findall(r"\d+", build))
    vec = VectorLayout(N, D, H, F, layers=int(layers))
    want_scalar = f"{Layout(N, D, H, F).length:,}" if int(layers) == 1 else "-"
    assert [scalar, vector, width] == [want_scalar, f"{vec.length:,}", f"{vec.width:,}"], (
        f"docs/simulator.md: the row for {build} x {layers} is not what the layouts compute"
    )


def _vector_law(N: int, D: int, H: int, F: int, L: int) -> tuple[int, int]:
    """The vector layout's length and width as docs/simulator.md states them."""
    block = 1 + 4 * D + 2 * H + (6 + F + D if F else 0)
    return max(1 + N + L * block, 3 * N * D, N * N * H, 3 * N * H, N * F), max(D, F, 10) + 1


def _scalar_law(N: int, D: int, H: int, F: int) -> int:
    """The scalar layout's length as docs/simulator.md states it."""
    Dp = D + 1
    inputs = N * D + H * Dp * Dp + H * Dp * D + D + N + 1
    if F:
        inputs += 3 * (2 * D + 1) + 5 + D + D * F + F + F * D + D
    return max(inputs, N * H * Dp + N * H * D, N * N * H)


SIZES = [
    (1, 1, 1, 0),
    (2, 2, 1, 0),
    (1, 1, 4, 0),
    (3, 4, 2, 8),
    (7, 3, 5, 0),
    (5, 8, 4, 32),
    (12, 384, 12, 1536),
]


@pytest.mark.parametrize("N, D, H, F", SIZES)
def test_the_page_laws_are_what_the_layouts_compute(N, D, H, F):
    page = PAGE.read_text()
    assert "max(1 + N + L(1 + 4D + 2H + 6 + F + D), 3ND, N^2 H, 3NH, NF)" in page
    assert "max(D, F, 10) + 1" in page
    for L in (1, 3) if F else (1,):
        vec = VectorLayout(N, D, H, F, layers=L)
        assert _vector_law(N, D, H, F, L) == (vec.length, vec.width)
    assert _scalar_law(N, D, H, F) == Layout(N, D, H, F).length


@pytest.mark.parametrize("layout", [Layout(2, 2, 1), VectorLayout(2, 2, 1)], ids=repr)
def test_the_page_diagrams_are_what_the_layouts_print(layout):
    assert layout.diagram() in PAGE.read_text(), (
        f"docs/simulator.md: the diagram of {layout!r} is not what diagram() prints"
    )


@pytest.mark.parametrize("build", [(2, 2, 1), (4, 4, 2), (8, 8, 4)])
def test_the_page_reports_are_what_the_code_reports(build):
    """The example reports under "Costs" are U.report() of today's builds."""
    from attnsim.simulator import universal

    report = str(universal.build(*build, layout="scalar").report()).rsplit(", built in", 1)[0]
    assert report in PAGE.read_text()
