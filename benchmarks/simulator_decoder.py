"""U for today's layers (``layer="decoder"``): accuracy sweeps per target kind, and a
LLaMA-shaped decoder layer at its real size.

Sweeps: for each kind below, random targets at U(4, 4, 2) with feed-forward width up to 8,
each X random, scores scaled up to |20|, simulated by one decoder U and compared with the
reference (float64, relative to the output's largest entry). Kinds:

- ``llama``: pre-RMSNorm, causal rotary attention without biases, SwiGLU;
- ``rmsnorm``: RMSNorm (pre- or post-), plain feed-forward (relu, gelu, gelu_tanh, maxmin);
- ``no_norm``: no norm at all, plain feed-forward;
- ``glu``: gated feed-forwards with every gate (identity: bilinear; relu; gelu; silu);
- ``rotary``: rotary attention (causal or not) in a LayerNorm layer;
- ``linear``: linear attention (feature map elu + 1 or relu, causal or not, eps 1e-6);
- ``linformer``: Linformer projections of keys and values onto k <= n rows (E, F random);
- ``mixed``: every option drawn (``sampling_decoder.random_decoder_target``).

Then U is built for a LLaMA-shaped layer (n = 16, d = 256, 8 heads, d_ff = 688; sparse
storage) and simulates one random layer of that shape with scores up to |30|: build and
simulate seconds, peak memory, the error against a plain-torch LLaMA layer written from the
definition (here), and against transformers' ``LlamaDecoderLayer`` when it is installed
(which computes its RMSNorm in float32 even in a float64 model, so it agrees to about
1e-7 only).

Then the same sweeps on a decoder U with ReLU maps (300 targets per kind, every kind).

Run: ``python benchmarks/simulator_decoder.py`` (1,000 targets per kind, 300 with ReLU
maps; ``--quick``: 30 targets per kind and no LLaMA layer; ``--targets K``,
``--relu-targets K``); writes
benchmarks/results/simulator_decoder.json.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

# isort: off
import attnsim  # noqa: F401  (before torch: its huge-page setting takes effect)

# isort: on
import numpy as np
import torch
from _common import Run, write_json
from simulator_cost import PeakMemory, time_direct

from attnsim.simulator import hierarchy, reference, sampling, sampling_decoder, universal
from attnsim.simulator.llama import llama_forward, llama_layer, random_weights
from attnsim.simulator.spec_modern import RotarySpec
from attnsim.simulator.stack import EncoderStackSpec
from attnsim.simulator.verify import relative_error

RESULTS = Path(__file__).resolve().parent / "results" / "simulator_decoder.json"
SWEEP = (4, 4, 2, 8)  # n, d, heads, d_ff of the sweeps' U
LLAMA = (16, 256, 8, 688)  # n, d, heads, d_ff
TOLERANCE = 1e-9


def draw(kind: str, rng: np.random.Generator) -> tuple:
    """One random target of ``kind`` and its X (``sampling_decoder.random_kind_target``)."""
    return sampling_decoder.random_kind_target(rng, kind, *SWEEP, max_logit=20.0)[:2]


def sweep(U, kind: str, count: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    cases = [draw(kind, rng) for _ in range(count)]
    errors = []
    t0 = time.perf_counter()
    for start in range(0, count, 16):
        chunk = cases[start : start + 16]
        for (t, X), got in zip(chunk, U.simulate_batch(chunk)):
            errors.append(relative_error(got, reference.reference(t, X)))
    return {
        "kind": kind,
        "targets": count,
        "max_error": max(errors),
        "median_error": float(np.median(errors)),
        "failures": sum(e > TOLERANCE for e in errors),
        "seconds": time.perf_counter() - t0,
    }


def llama(seed: int = 0, score: float = 30.0) -> dict:
    n, d, h, f = LLAMA
    gen = torch.Generator().manual_seed(seed)
    w = random_weights(d, f, gen, norm_std=0.1)
    X = torch.randn(n, d, generator=gen, dtype=torch.float64)
    base, eps = 10000.0, 1e-6
    layer = llama_layer(d, h, f, weights=w, base=base, eps=eps)
    peak = float(
        reference.scores(layer.attention, reference.layer_norm(layer.norm1, X)).abs().max()
    )
    w["q"] = w["q"] * (score / peak)  # the largest |score| on X becomes 30
    layer = llama_layer(d, h, f, weights=w, base=base, eps=eps)
    want = llama_forward(w, X, h, base=base, eps=eps)
    t0 = time.perf_counter()
    U = universal.build(n, d, h, layer="decoder", max_ff=f)
    build = time.perf_counter() - t0
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        got = U.simulate(layer, X)
        simulate = time.perf_counter() - t0
    direct = time_direct(lambda: llama_forward(w, X, h, base=base, eps=eps))
    r_ = U.report()
    out = {
        "n": n,
        "d": d,
        "heads": h,
        "d_ff": f,
        "sequence_length": r_.sequence_length,
        "token_width": U.model.config.token_width,
        "d_model": r_.d_model,
        "layers": r_.layers,
        "storage": U.model.storage,
        "peak_live_columns": getattr(U.model.runtime, "peak_columns", None),
        "build_seconds": build,
        "simulate_seconds": simulate,
        "direct_seconds": direct,
        "wall_ratio": simulate / direct,
        "peak_extra_mb": mem.extra_mb,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "max_abs_score": score,
        "error_vs_definition": relative_error(got, want),
    }
    out |= _vs_transformers(U, w, X, base, eps)
    return out


def _vs_transformers(U, w: dict, X: torch.Tensor, base: float, eps: float) -> dict:
    """U against transformers' LlamaDecoderLayer with the same weights (its own rotary
    tables), where transformers is installed."""
    try:
        import transformers
        from transformers.models.llama import modeling_llama as ml
    except ImportError:
        return {"transformers": None}
    n, d = X.shape
    h, f = LLAMA[2], LLAMA[3]
    cfg = transformers.LlamaConfig(
        hidden_size=d,
        num_attention_heads=h,
        num_key_value_heads=h,
        intermediate_size=f,
        rms_norm_eps=eps,
        rope_theta=base,
        attn_implementation="sdpa",
    )
    hf = ml.LlamaDecoderLayer(cfg, 0).double().eval()
    names = {
        "q": "self_attn.q_proj",
        "k": "self_attn.k_proj",
        "v": "self_attn.v_proj",
        "o": "self_attn.o_proj",
        "gate": "mlp.gate_proj",
        "up": "mlp.up_proj",
        "down": "mlp.down_proj",
        "norm1": "input_layernorm",
        "norm2": "post_attention_layernorm",
    }
    with torch.no_grad():
        for key, name in names.items():
            hf.get_submodule(name).weight.copy_(w[key])
        cos, sin = ml.LlamaRotaryEmbedding(cfg)(X[None], torch.arange(n)[None])
        mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)[None, None]
        want = hf(X[None], attention_mask=mask, position_embeddings=(cos, sin))
    want = (want[0] if isinstance(want, tuple) else want)[0]
    from attnsim.simulator import from_torch

    got = U.simulate(from_torch(hf, rotary=RotarySpec(cos=cos[0], sin=sin[0])), X)
    return {
        "transformers": transformers.__version__,
        "error_vs_transformers": relative_error(got, want),
    }


def relu_sweep(count: int, seed: int = 9) -> dict:
    """A decoder U with ReLU maps (tolerance 1e-6) on ``count`` random layers of every kind
    it reads (linear attention included: phi's exp and 1/Z as ReLU maps). A target whose
    values leave the ranges the maps cover (``value_bound``, or a linear-attention row sum
    below 1e-6) is refused by U's run-time checks with a message: counted, not compared. A
    target whose output is exactly 0 (a post-norm LayerNorm at d = 1 without bias gives its
    bias, 0) has no relative error: its largest |output| is recorded. The sanity bound is a
    thousand times the largest per-map bound, as for encoder U's (a norm divides by its
    row's spread: no composite certificate)."""
    n, d, h, f = SWEEP
    t0 = time.perf_counter()
    # dense storage: its ReLU maps' 28,000 units run about 4x faster than the sparse form
    # that "auto" picks for weights over 256 MiB (here about 270 MiB)
    R = universal.build(
        n, d, h, layer="decoder", max_ff=f, maps="relu", logit_bound=20.0, storage="dense"
    )
    build = time.perf_counter() - t0
    bound = 1e3 * max(R.map_bounds.values())
    kinds = []
    for i, kind in enumerate(sampling_decoder.DECODER_KINDS):
        rng = np.random.default_rng(seed + i)
        errors, refused, zero = [], 0, []
        t0 = time.perf_counter()
        for _ in range(count):
            t, X = draw(kind, rng)
            try:
                got = R.simulate(t, X)
            except ValueError as exc:
                if "range this U" not in str(exc) and "outside" not in str(exc):
                    raise
                refused += 1
                continue
            want = reference.reference(t, X)
            if float(want.abs().max()) == 0.0:  # a degenerate layer (LayerNorm at d = 1, no
                zero.append(float(got.abs().max()))  # bias): no relative error; absolute
                continue
            errors.append(relative_error(got, want))
        row = {
            "kind": kind,
            "targets": count,
            "refused": refused,
            "max_error": max(errors),
            "median_error": float(np.median(errors)),
            "failures": sum(e > bound for e in errors),
            "zero_outputs": len(zero),
            "zero_outputs_max_abs": max(zero, default=0.0),
            "seconds": time.perf_counter() - t0,
        }
        print(f"ReLU maps, {kind:>8}: {row}", flush=True)
        kinds.append(row)
    return {
        "build_seconds": build,
        "map_tolerance": R.config.map_tolerance,
        "largest_map_bound": max(R.map_bounds.values()),
        "tolerance": bound,
        "kinds": kinds,
    }


def hierarchy_rows(seed: int = 0) -> dict:
    """U' (a decoder U) simulates the first block of U(2, 2, 1), then all of it, on U's own
    input for one random attention target; compared with U's residual streams."""
    U = universal.build(
        2, 2, 1, attention="softmax", maps="relu", map_tolerance=1e-2, logit_bound=10.0
    )
    target = sampling.random_attention(1, 2, seed=seed)
    X = torch.tensor(np.random.default_rng(seed).standard_normal((2, 2)), dtype=torch.float64)
    ids, vals = U.model_inputs(U.encode(target, X)[None])
    X0 = hierarchy.embedded(U.model, ids=ids, values=vals)
    streams = {2: None}
    with torch.no_grad():
        final = U.model.runtime(ids, vals, streams=streams)[0]
    out = {"inner": "U(2, 2, 1), softmax attention, ReLU maps (tolerance 1e-2)"}
    out["inner_d_model"], out["inner_blocks"] = X0.shape[1], len(U.model.model.blocks)
    for name, stack, want in (
        ("one_block", hierarchy.block_targets(U.model, 0), streams[2][0]),
        ("all_blocks", hierarchy.stack_targets(U.model).layers, final),
    ):
        n, d = X0.shape
        heads = max(x.attention.n_heads for x in stack)
        ff = max(x.ffn.d_mlp for x in stack)
        t0 = time.perf_counter()
        V = universal.build(
            n, d, heads, layer="decoder", max_ff=ff, n_layers=len(stack), score_bound=1e9
        )
        build = time.perf_counter() - t0
        target_stack = stack[0] if len(stack) == 1 else EncoderStackSpec(tuple(stack))
        t0 = time.perf_counter()
        got = V.simulate(target_stack, X0)
        out[name] = {
            "target_layers": len(stack),
            "u_prime": [n, d, heads, ff],
            "sequence_length": V.layout.length,
            "d_model": V.model.config.d_model,
            "storage": V.model.storage,
            "build_seconds": build,
            "simulate_seconds": time.perf_counter() - t0,
            "error_vs_inner_stream": relative_error(got, want),
        }
        print(f"hierarchy {name}: {out[name]}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 targets per kind, no LLaMA layer")
    parser.add_argument("--targets", type=int, default=None, help="targets per kind (default 1000)")
    parser.add_argument(
        "--relu-targets", type=int, default=None, help="ReLU-maps targets per kind (default 300)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    run = Run()
    count = args.targets or (30 if args.quick else 1000)
    n, d, h, f = SWEEP
    U = universal.build(n, d, h, layer="decoder", max_ff=f)
    sweeps = []
    for i, kind in enumerate(sampling_decoder.DECODER_KINDS):
        row = sweep(U, kind, count, seed=i)
        sweeps.append(row)
        print(
            f"{kind:>8}: {row['targets']} targets, max error {row['max_error']:.1e}, "
            f"failures {row['failures']}, {row['seconds']:.1f} s",
            flush=True,
        )
    out = {"machine": None, "sweep_build": list(SWEEP), "tolerance": TOLERANCE, "sweeps": sweeps}
    out["relu"] = relu_sweep(args.relu_targets or (30 if args.quick else 300))
    if not args.quick:
        out["llama"] = llama()
        print(f"LLaMA-shaped layer {LLAMA}: {out['llama']}", flush=True)
        out["hierarchy"] = hierarchy_rows()
    out["machine"] = run.machine()
    write_json(args.out, out)
    rows = [*sweeps, *out["relu"]["kinds"]]
    return 0 if all(s["failures"] == 0 for s in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
