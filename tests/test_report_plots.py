"""Report plots, the simulator table and the report writer: files, titles, contents."""

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

from attnsim.compiler import compile_program
from attnsim.rasp import library
from attnsim.report import plots, report_cli
from attnsim.report import simulator_table as st
from attnsim.simulator import universal

PNG = b"\x89PNG\r\n\x1a\n"
ROOT = Path(__file__).resolve().parents[1]


def _png(path: Path) -> None:
    assert path.exists(), path
    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 2000, (path, len(data))


@pytest.fixture(scope="module")
def hist():
    entry = library.PROGRAMS["make_hist"]
    return compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)


@pytest.fixture(scope="module")
def reverse():
    entry = library.PROGRAMS["make_reverse"]
    return compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)


def test_attention_patterns_one_panel_per_active_head(reverse, tmp_path):
    example = list("abcd")
    fig = plots.attention_patterns(reverse, example, name="reverse", path=tmp_path / "a.png")
    _png(tmp_path / "a.png")
    active = [
        (layer, h)
        for layer, block in enumerate(reverse.model.blocks)
        for h in block.attn.active_heads().tolist()
    ]
    images = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in images] == [f"layer {a}, head {b}" for a, b in active]
    assert fig._suptitle.get_text() == (
        "Attention patterns of reverse on ['a', 'b', 'c', 'd'] (attention = hard)"
    )
    # the drawn matrices are the cached patterns (rows sum to 1, BOS + 4 positions)
    _, cache = reverse.run_with_cache(example)
    first = images[0].images[0].get_array()
    want = cache[f"blocks.{active[0][0]}.attn.hook_pattern"][0, active[0][1]].numpy()
    assert first.shape == (5, 5) and (first == want).all()
    for ax in images:
        assert ax.get_xlabel() == "key position (0 = BOS)"
        assert ax.get_ylabel() == "query position"
    assert fig.axes[-1].get_ylabel().startswith("attention weight")  # the colour bar
    plots.close(fig)


def test_attention_patterns_softmax_title(tmp_path):
    entry = library.PROGRAMS["make_hist"]
    model = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=4, attention="softmax")
    fig = plots.attention_patterns(model, ["a", "b"], path=tmp_path / "s.png")
    _png(tmp_path / "s.png")
    assert fig._suptitle.get_text().endswith("(attention = softmax)")
    plots.close(fig)


@pytest.mark.parametrize(
    "labels, want",
    [
        (["bos", "notbos"], [("bos", 0, 1), ("notbos", 1, 2)]),
        (["a:1", "a:2", "b@inv", "b:0", "a:3"], [("a", 0, 2), ("b", 2, 4), ("a", 4, 5)]),
        ([], []),
    ],
)
def test_subspace_groups(labels, want):
    assert plots.subspace_groups(labels) == want


def test_residual_layout_covers_every_dimension(reverse, tmp_path):
    fig = plots.residual_layout(reverse, name="reverse", path=tmp_path / "r.png")
    _png(tmp_path / "r.png")
    ax = fig.axes[0]
    assert (
        ax.get_title() == f"Residual stream layout of reverse (d_model = {len(reverse.residual)})"
    )
    assert ax.get_xlabel().startswith("residual dimension")
    assert ax.get_ylabel() == "named subspace (S-op)"
    # the bars tile 0 .. d_model - 1 exactly once
    covered = []
    for coll in ax.collections:
        for path in coll.get_paths():
            xs = path.vertices[:, 0]
            covered.append((round(xs.min()), round(xs.max())))
    cells = sorted(i for a, b in covered for i in range(a, b))
    assert cells == list(range(len(reverse.residual)))
    names = [t.get_text() for t in ax.get_yticklabels()]
    assert {"bos", "tokens", "indices", "length"} <= set(names)
    plots.close(fig)


def test_forward_flops_matches_a_hand_count():
    U = universal.build(2, 2, 1)
    cfg = U.model.config
    p = U.layout.length + 1
    heads = st.active_heads_per_layer(U.model)
    assert heads == [int((b.attn.W_O.flatten(1) != 0).any(1).sum()) for b in U.model.model.blocks]
    d = cfg.d_model
    blocks = U.model.model.blocks
    ks = [b.attn.W_Q.shape[2] for b in blocks]  # each layer stores its own d_head
    f = st.forward_flops(U.model, p)
    assert f["attention"] == sum(
        h * (6 * p * d * k + 4 * p * p * k + 4 * p * p + 2 * p * k * d) for h, k in zip(heads, ks)
    )
    native = sum(cfg.d_native.values())
    relu = sum(b.mlp.W_in.shape[1] for b in blocks)
    bilinear = sum(b.mlp.W_bil_a.shape[1] for b in blocks)
    assert f["mlp"] == (4 * p * d + p) * relu + bilinear * (6 * p * d + p) + cfg.n_layers * (
        native * (6 * p * d + 2 * p)
    )
    assert st.forward_flops(U.model, p, batch=3)["total"] == 3 * f["total"]


def test_simulator_table_and_cost_plot(tmp_path):
    rows = st.simulator_rows([(2, 2, 1), (3, 3, 1), (2, 2, 2)])  # tiny builds: ~0.1 s each
    for layout in ("scalar", "vector"):  # depth does not grow
        assert len({r["layers"] for r in rows if r["layout"] == layout}) == 1
    assert rows[2]["parameters"] > rows[0]["parameters"]  # scalar (3, 3, 1) > (2, 2, 1)
    text = st.simulator_table(rows)
    rows = [r for r in rows if r["layout"] == "scalar"]
    assert "| (3, 3, 1) | scalar | 6 |" in text and "| ~13 | 8 |" in text
    assert "| (3, 3, 1) | vector | 10 |" in text
    fig = plots.simulator_cost(rows, path=tmp_path / "c.png")
    _png(tmp_path / "c.png")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [
        "U parameters",
        "U sequence length and residual width",
        "Forward FLOPs (one target)",
    ]
    assert all(ax.get_xlabel() == "build size n = d (rows = width of X)" for ax in fig.axes)
    assert fig.axes[0].get_ylabel() == "parameters (count)"
    plots.close(fig)
    timed = [
        dict(r, simulate_seconds=0.1 * (i + 1), direct_seconds=1e-4) for i, r in enumerate(rows)
    ]
    fig = plots.simulator_cost(timed)
    assert fig.axes[3].get_title() == "Wall time per simulated target"
    assert fig.axes[3].get_ylabel() == "seconds"
    plots.close(fig)


def test_relu_width_plot_and_support_flag(tmp_path):
    fig = plots.relu_width_error([(4, 0.1), (8, 0.03)], path=tmp_path / "w.png")
    _png(tmp_path / "w.png")
    assert fig.axes[0].get_title() == "Error of exp realised with ReLU units"
    assert fig.axes[0].get_xlabel() == "ReLU units (hidden width)"
    plots.close(fig)
    supported = plots.relu_maps_supported()
    try:
        from attnsim.rasp import expr as E

        x = E.numerical(E.tokens, value_range=(-1.0, 1.0))
        compile_program(E.exp(x), vocab=None, max_seq_len=2, maps="relu")
        accepted = True
    except (ValueError, NotImplementedError):
        accepted = False
    assert supported is accepted


def test_write_report_links_every_image(tmp_path):
    cost = tmp_path / "cost.json"
    rows = [
        dict(
            max_n=n,
            max_heads=1,
            parameters=9 * n**3,
            nonzero_parameters=n**3,
            sequence_length=3 * n * n,
            d_model=20 * n,
            flops_U=n**5,
            simulate_seconds=0.1 * n,
            direct_seconds=1e-4,
        )
        for n in (2, 4)
    ]
    cost.write_text(json.dumps({"results": rows}))
    path = report_cli.write_report(
        tmp_path / "docs",
        cost_json=cost,
        programs=[("make_hist", "hard"), ("make_length", "softmax")],
        layouts=["make_hist"],
        builds=[(2, 2, 1)],
    )
    text = path.read_text()
    assert path.name == "report.md" and text.startswith("<!-- Generated")
    links = [line.split("](")[1].rstrip(")") for line in text.splitlines() if line.startswith("![")]
    assert links == [
        "img/attention_make_hist_hard.png",
        "img/attention_make_length_softmax.png",
        "img/residual_make_hist.png",
        "img/simulator_cost.png",
        "img/relu_exp.png",
        "img/relu_reciprocal.png",
    ]
    for link in links:
        _png(path.parent / link)
    assert "Input `['a', 'b', 'b', 'c', 'a', 'b']` gives `[2, 3, 3, 1, 2, 3]`" in text
    assert "| (2, 2, 1) | scalar | 6 | 5 |" in text
    assert "## Bounded maps" in text
    rows = [line for line in text.splitlines() if line.startswith("| exp |")]
    assert len(rows) == 5  # measured error <= certified bound in every row
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[4]) <= float(cells[3])


def test_report_subcommands(capsys):
    parser = argparse.ArgumentParser(prog="report")
    report_cli.add_report_subcommands(parser.add_subparsers(dest="what"))
    args = parser.parse_args(["simulator", "--builds", "2,2,1", "3,3,1", "--json"])
    assert args.func(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(b["max_n"], b["layout"]) for b in data["builds"]] == [
        (2, "scalar"),
        (2, "vector"),
        (3, "scalar"),
        (3, "vector"),
    ]
    assert data["paper"]["fused U"] == 8 and data["paper"]["transpose"] == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["simulator", "--builds", "2,2"])
    assert "N,D,H" in capsys.readouterr().err


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_render_docs_from_results(tmp_path):
    render_docs = _load("render_docs")
    results = tmp_path / "results"
    results.mkdir()
    run = {"seconds": 0.02, "wall_ratio": 400.0, "peak_extra_mb": 1.5}
    cost_row = {
        "max_n": 2,
        "max_d": 2,
        "max_heads": 1,
        "layers": 6,
        "d_model": 76,
        "sequence_length": 24,
        "parameters": 67336,
        "nonzero_parameters": 1159,
        "build_seconds": 0.05,
        "plan_seconds": 0.01,
        "executors": {"plan": run, "dense": {**run, "seconds": 0.5, "wall_ratio": 10000.0}},
        "simulate_seconds": 0.02,
        "direct_seconds": 5e-5,
        "wall_ratio": 400.0,
        "flops_U": 1.5e6,
        "flop_ratio": 11000.0,
        "flop_ratio_plan": 900.0,
        "error_U_vs_reference": 1e-16,
    }
    goal = {
        "ratio": {
            "measured": True,
            "limit": 2000.0,
            "met": True,
            "ratio": 400.0,
            "ratio_dense": 10000.0,
            "error": 1e-16,
            "where_the_time_goes": {"blocks.0.attn": 0.01, "blocks.1.attn": 0.005},
        },
        "time": {
            "measured": True,
            "limit_seconds": 60.0,
            "met": False,
            "build_seconds": 6.0,
            "simulate_seconds": 90.0,
            "total_seconds": 96.0,
            "error": 1e-16,
        },
    }
    (results / "simulator_cost.json").write_text(
        json.dumps({"results": [cost_row], "exponents": {"parameters": {"all": 2.9}}, "goal": goal})
    )
    (results / "other.json").write_text(json.dumps({"programs": 10, "disagreements": 0}))
    text = render_docs.render(results)
    assert text.startswith("<!-- Generated by benchmarks/render_docs.py")
    assert "Do not edit by hand" in text
    assert (
        "**Goal (scalar layout): U(32, 32, 1) simulates one target within 2,000x of direct "
        "attention: met**" in text
    )
    assert (
        "**Goal (scalar layout): U(64, 64, 1) builds and simulates within 60 s: not met**" in text
    )
    assert "| (2, 2, 1) | scalar | 76 | 24 | 67,336 |" in text
    assert "| parameters | 2.9 | - |" in text
    assert "## other" in text and "| disagreements | 0 |" in text
