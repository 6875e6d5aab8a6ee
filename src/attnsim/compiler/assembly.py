"""Stage 5, assembly: layers of named blocks become dense PyTorch weights, and the weights
with their residual basis, run-time checks and report become a ``CompiledModel``.

A head's score terms ``(query dir, key dir, w)`` become W_Q (one column per query direction
it reads) and W_K (the weights); its value map becomes W_V (one column per source direction)
and W_O. Embedding rows: 0 is BOS, then the vocabulary; the positional embedding holds the
static S-ops.

Glossary: d_model = residual directions, n_ctx = max_seq_len + 1 (BOS first), d_vocab =
1 + vocabulary size.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from itertools import chain

import numpy as np
import torch

from attnsim.compiler import components, precision, scheduling, tracing
from attnsim.compiler.lowering import LoweredProgram
from attnsim.compiler.options import SPARSE_ABOVE, CompileOptions
from attnsim.ir.basis import Basis
from attnsim.ir.blocks import Layer
from attnsim.model import memory
from attnsim.model.compiled import CompiledModel, GuardSpec, OutputSpec, Report
from attnsim.model.config import ModelConfig
from attnsim.model.sparse import SparseHeads, SparseLayer, SparseTransformer, SparseUnits
from attnsim.model.sparse_ops import factor_side
from attnsim.model.transformer import Transformer
from attnsim.rasp import expr as E
from attnsim.values import value_key


def inverse_temperature(max_seq_len: int, value_scale: float) -> float:
    """Softmax mode's beta: the weight on unselected keys stays below 1e-17 of the values'
    spread (``e^-40`` per key, over ``max_seq_len + 1`` keys, times ``value_scale^2``).

    >>> round(inverse_temperature(9, 1.0), 3)
    84.605
    """
    return 2.0 * (math.log(max_seq_len + 1) + 40.0 + math.log(value_scale))


def model_config(
    layers: Sequence[Layer],
    lowered: LoweredProgram,
    options: CompileOptions,
    dtype: torch.dtype | None = None,
) -> ModelConfig:
    """The :class:`ModelConfig` of the model holding ``layers`` (either storage); example
    with :func:`assemble_sparse`."""
    token_vocab = [] if lowered.vocab is None else list(lowered.vocab)
    max_seq_len = lowered.max_seq_len
    numerical_token_dir = lowered.numerical_token_dir
    attention = options.attention.value
    beta = inverse_temperature(max_seq_len, options.value_scale)
    causal = options.causal
    dtype = options.dtype if dtype is None else dtype
    assert dtype in (torch.float64, torch.float32), dtype
    d_model = len(lowered.residual)  # one residual direction per label
    # each head's query/key (and value/output) factors: one column per direction on the side
    # with fewer distinct directions, the weights on the other side
    qk_plans = [[_factor(h.qk) for h in layer.heads] for layer in layers]
    ov_plans = [[_factor(h.ov) for h in layer.heads] for layer in layers]
    n_heads = max([len(layer.heads) for layer in layers] + [1])
    d_head = max([1] + [p[0] for plans in qk_plans + ov_plans for p in plans])
    # each layer stores its own heads at its own width (a layer without heads stores none)
    shapes = tuple(
        (len(layer.heads), max([1] + [p[0] for p in qk + ov]) if layer.heads else 0)
        for layer, qk, ov in zip(layers, qk_plans, ov_plans)
    )
    widths = [len(layer.relu) for layer in layers]
    d_mlp = max(widths + [0])
    d_bil = max([len(layer.bilinear) for layer in layers] + [0])
    bil_widths = [len(layer.bilinear) for layer in layers]
    d_native: dict[str, int] = {}
    for layer in layers:
        counts: dict[str, int] = {}
        for u in layer.native:
            counts[u.kind] = counts.get(u.kind, 0) + 1
        for k, c in counts.items():
            d_native[k] = max(d_native.get(k, 0), c)
    cfg = ModelConfig(
        n_layers=len(layers),
        d_model=d_model,
        n_heads=n_heads,
        d_head=d_head,
        d_mlp=d_mlp,
        mlp_widths=tuple(widths) if len(set(widths)) > 1 else None,
        head_shapes=None if set(shapes) == {(n_heads, d_head)} else shapes,
        bilinear_widths=tuple(bil_widths) if len(set(bil_widths)) > 1 else None,
        d_bilinear=d_bil,
        d_native=d_native,
        n_ctx=max_seq_len + 1,
        d_vocab=1 + max(len(token_vocab), 1),
        numerical_tokens=numerical_token_dir is not None,
        token_width=1 + max(lowered.token_channel_dirs, default=-1),
        attention=attention,
        beta=beta,
        causal=causal,
        dtype="float64" if dtype == torch.float64 else "float32",
    )
    return cfg


def assemble(
    layers: Sequence[Layer],
    lowered: LoweredProgram,
    options: CompileOptions,
    dtype: torch.dtype | None = None,
    cfg: ModelConfig | None = None,
) -> Transformer:
    """Builds the Transformer holding ``layers`` over the lowered program's residual basis.

    ``dtype`` is the weights' dtype (``precision.choose``); None: ``options.dtype``, which
    must then be torch.float64 or torch.float32. ``cfg``: :func:`model_config` of the same
    arguments, when the caller has it.

    Raises:
        ModelTooLargeError: the weights would not fit in memory (before allocating them).
    """
    basis = Basis(lowered.residual)
    static_embed = lowered.static_embed
    token_dims = lowered.token_dims
    token_vocab = [] if lowered.vocab is None else list(lowered.vocab)
    numerical_token_dir = lowered.numerical_token_dir
    dtype = options.dtype if dtype is None else dtype
    cfg = model_config(layers, lowered, options, dtype) if cfg is None else cfg
    d_model, n_heads, d_mlp, d_native = cfg.d_model, cfg.n_heads, cfg.d_mlp, dict(cfg.d_native)
    ix = basis.index
    qk_plans = [[_factor(h.qk) for h in layer.heads] for layer in layers]
    ov_plans = [[_factor(h.ov) for h in layer.heads] for layer in layers]
    # weights are accumulated in float64 numpy arrays, then copied into the model once:
    # refuse sizes that cannot fit before allocating either
    itemsize = 8 if dtype == torch.float64 else 4
    params = memory.weight_bytes(cfg) // itemsize
    memory.check_fits(
        params * (8 + itemsize) + memory.attention_bytes(cfg.n_ctx, n_heads, itemsize),
        f"the compiled model ({cfg.n_layers} layers, d_model={d_model}, d_mlp={d_mlp}, "
        f"{n_heads} heads, n_ctx={cfg.n_ctx}: {params} parameters)",
        "lower max_seq_len or the value sets the program enumerates (vocab, map outputs), "
        "or split the program",
    )
    weights: dict[str, np.ndarray] = {}

    def w(name: str, *shape: int) -> np.ndarray:
        got = weights.get(name)
        if got is None:
            got = weights[name] = np.zeros(shape, dtype=np.float64)
        return got

    W_E = w("W_E", cfg.d_vocab, d_model)
    W_E[0, ix("bos")] = 1.0
    W_E[1:, ix("notbos")] = 1.0
    row = {value_key(v): i + 1 for i, v in enumerate(token_vocab)}
    for d, v in token_dims.items():
        W_E[row[value_key(v)], ix(d)] = 1.0
    if numerical_token_dir is not None:
        w("W_E_num", d_model)[ix(numerical_token_dir)] = 1.0
    if cfg.token_width:
        W_E_vec = w("W_E_vec", cfg.token_width, d_model)
        for k, d in lowered.token_channel_dirs.items():
            W_E_vec[k, ix(d)] = 1.0
    W_pos = w("W_pos", cfg.n_ctx, d_model)
    for d, vals in static_embed.items():
        W_pos[1:, ix(d)] = np.asarray(vals, dtype=np.float64)
    for li, layer in enumerate(layers):
        pre = f"blocks.{li}"
        if layer.heads:
            h, k = cfg.head_shape(li)
            W_Q = w(f"{pre}.attn.W_Q", h, d_model, k)
            W_K = w(f"{pre}.attn.W_K", h, d_model, k)
            W_V = w(f"{pre}.attn.W_V", h, d_model, k)
            W_O = w(f"{pre}.attn.W_O", h, k, d_model)
        for hi, h in enumerate(layer.heads):
            _fill(W_Q[hi], W_K[hi], h.qk, qk_plans[li][hi], ix)
            _fill(W_V[hi], W_O[hi].T, h.ov, ov_plans[li][hi], ix)
        width = cfg.mlp_width(li)
        _fill_units(w, f"{pre}.mlp.W_in", f"{pre}.mlp.W_out", layer.relu, d_model, width, ix)
        if layer.bilinear:
            nb = cfg.bilinear_width(li)
            a = w(f"{pre}.mlp.W_bil_a", d_model, nb)
            b = w(f"{pre}.mlp.W_bil_b", d_model, nb)
            out = w(f"{pre}.mlp.W_bil_out", nb, d_model)
            for ui, u in enumerate(layer.bilinear):
                _accumulate(a, [ix(d) for d, _ in u.a], ui, [c for _, c in u.a])
                _accumulate(b, [ix(d) for d, _ in u.b], ui, [c for _, c in u.b])
                _accumulate(out.T, [ix(d) for d, _ in u.outputs], ui, [c for _, c in u.outputs])
        slot: dict[str, int] = {}
        for u in layer.native:
            ui = slot.get(u.kind, 0)
            slot[u.kind] = ui + 1
            m = d_native[u.kind]
            for part, form in (("in", u.inputs), ("gate", u.gate)):
                arr = w(f"{pre}.mlp.W_{u.kind}_{part}", d_model, m)
                _accumulate(arr, [ix(d) for d, _ in form], ui, [c for _, c in form])
            arr = w(f"{pre}.mlp.W_{u.kind}_out", m, d_model)
            _accumulate(arr.T, [ix(d) for d, _ in u.outputs], ui, [c for _, c in u.outputs])
    model = Transformer(cfg)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, arr in weights.items():
            params[name].copy_(torch.from_numpy(arr))
    return model


def assemble_sparse(
    layers: Sequence[Layer],
    lowered: LoweredProgram,
    options: CompileOptions,
    dtype: torch.dtype | None = None,
    cfg: ModelConfig | None = None,
) -> SparseTransformer:
    """The same model as :func:`assemble`, held as its non-zero weights
    (:class:`~attnsim.model.sparse.SparseTransformer`): the layers' terms as coordinate
    lists over the residual basis, the embedding as its non-zero rows.

    >>> from attnsim import library
    >>> from attnsim.compiler import lowering, scheduling, tracing, value_inference
    >>> from attnsim.compiler.options import resolve
    >>> opts = resolve(None, {"dtype": "float64"})
    >>> graph = tracing.trace(library.make_hist())
    >>> low = lowering.lower(graph, value_inference.infer(graph, ["a", "b"], 4, opts), opts)
    >>> layers = scheduling.schedule(low).layers
    >>> cfg = model_config(layers, low, opts)
    >>> (cfg.n_layers, cfg.n_ctx) == (len(layers), 5)
    True
    >>> sparse_opts = resolve(None, {"storage": "sparse"})
    >>> storage_for(layers, low, opts), storage_for(layers, low, sparse_opts)
    ('dense', 'sparse')
    >>> sparse = assemble_sparse(layers, low, opts)
    >>> dense = assemble(layers, low, opts)
    >>> all(torch.equal(a, b) for a, b in zip(sparse.to_dense().parameters(), dense.parameters()))
    True
    """
    basis = Basis(lowered.residual)
    ix, at = basis.index, basis.positions()  # (at: the same, without the call per term)
    dtype = options.dtype if dtype is None else dtype
    cfg = model_config(layers, lowered, options, dtype) if cfg is None else cfg
    f64 = torch.float64

    def coo(rows: list, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        # one flat float64 read of every row (indices are exact in float64), then split
        flat = np.fromiter(
            chain.from_iterable(rows), dtype=np.float64, count=len(rows) * (width + 1)
        )
        flat = flat.reshape(len(rows), width + 1)
        idx = torch.from_numpy(flat[:, :width].astype(np.int64))
        return idx, torch.from_numpy(np.ascontiguousarray(flat[:, width]))

    E = [(0, ix("bos"), 1.0)]
    row = {value_key(v): i + 1 for i, v in enumerate(lowered.vocab or [])}
    for r in range(1, cfg.d_vocab):
        E.append((r, ix("notbos"), 1.0))
    for d, v in lowered.token_dims.items():
        E.append((row[value_key(v)], ix(d), 1.0))
    embed: dict[str, torch.Tensor] = {}
    embed["E"], embed["E_w"] = coo(E, 2)
    num = [] if lowered.numerical_token_dir is None else [ix(lowered.numerical_token_dir)]
    embed["num"] = torch.tensor(num, dtype=torch.long)
    embed["num_w"] = torch.ones(len(num), dtype=f64)
    embed["vec"], embed["vec_w"] = coo(
        [(k, ix(d), 1.0) for k, d in sorted(lowered.token_channel_dirs.items())], 2
    )
    # position columns (static S-ops): each one's most common value, and the other entries
    dirs = list(lowered.static_embed)
    embed["pos_dirs"] = torch.tensor([ix(d) for d in dirs], dtype=torch.long)
    defaults, others = [], []
    for d in dirs:  # (one column dense at a time: lowering may hold them as PositionColumn)
        col = np.asarray(lowered.static_embed[d], dtype=np.float64)  # positions 1..
        sample = col[:: max(1, len(col) // 64)]  # the default: the mode of a sample
        vals, counts = np.unique(sample, return_counts=True)
        defaults.append(float(vals[np.argmax(counts)]) if len(vals) else 0.0)
        others.append(np.flatnonzero(col != defaults[-1]).astype(np.int32))
        del col
    # the other entries, written in place (a list of parts and their concatenation would
    # hold them twice: the universal simulator's embedding has tens of millions)
    total = sum(len(o) for o in others)
    pos_at, pos_at_w = torch.empty(total, 2, dtype=torch.long), torch.empty(total, dtype=f64)
    start = 0
    for j, (d, other) in enumerate(zip(dirs, others)):
        stop = start + len(other)
        pos_at[start:stop, 0] = torch.from_numpy(other) + 1
        pos_at[start:stop, 1] = j
        col = np.asarray(lowered.static_embed[d], dtype=np.float64)  # (dense again, alone)
        pos_at_w[start:stop] = torch.from_numpy(col[other])
        start = stop
    embed["pos_default"] = torch.tensor(defaults, dtype=f64)
    embed["pos_at"], embed["pos_at_w"] = pos_at, pos_at_w
    out = []
    for layer in layers:
        qk = [(h, at[q], at[k], w) for h, head in enumerate(layer.heads) for q, k, w in head.qk]
        ov = [(h, at[a], at[b], w) for h, head in enumerate(layer.heads) for a, b, w in head.ov]
        heads = SparseHeads(len(layer.heads), *coo(qk, 3), *coo(ov, 3))
        units = []
        groups = [("relu", layer.relu), ("bilinear", layer.bilinear)]
        for kind in sorted({u.kind for u in layer.native}):
            groups.append((kind, [u for u in layer.native if u.kind == kind]))
        for kind, us in groups:
            if not us:
                continue
            first = [(i, at[d], c) for i, u in enumerate(us) for d, c in _first_form(u)]
            second = [(i, at[d], c) for i, u in enumerate(us) for d, c in _second_form(u)]
            outs = [(i, at[d], c) for i, u in enumerate(us) for d, c in u.outputs]
            units.append(SparseUnits(kind, len(us), *coo(first, 2), *coo(second, 2), *coo(outs, 2)))
        out.append(SparseLayer(heads, units))
    return SparseTransformer(cfg, out, embed)


def _first_form(u) -> tuple:
    return u.a if hasattr(u, "a") else u.inputs


def _second_form(u) -> tuple:
    if hasattr(u, "b"):
        return u.b
    return getattr(u, "gate", ())


def storage_for(
    layers: Sequence[Layer],
    lowered: LoweredProgram,
    options: CompileOptions,
    dtype: torch.dtype | None = None,
) -> str:
    """ "dense" or "sparse": what ``options.storage`` asks for ("auto": dense when the dense
    weights of ``layers`` fit in ``SPARSE_ABOVE`` bytes, sparse beyond); example with
    :func:`assemble_sparse`."""
    if options.storage != "auto":
        return options.storage
    return _storage(model_config(layers, lowered, options, dtype), options)


def _storage(cfg: ModelConfig, options: CompileOptions) -> str:
    if options.storage != "auto":
        return options.storage
    return "dense" if memory.weight_bytes(cfg) <= SPARSE_ABOVE else "sparse"


def build(
    layers: Sequence[Layer],
    lowered: LoweredProgram,
    options: CompileOptions,
    dtype: torch.dtype | None = None,
) -> Transformer | SparseTransformer:
    """The model in the storage :func:`storage_for` chooses: :func:`assemble` or
    :func:`assemble_sparse` (examples there)."""
    cfg = model_config(layers, lowered, options, dtype)  # (made once: it factors every head)
    if _storage(cfg, options) == "sparse":
        model = assemble_sparse(layers, lowered, options, dtype, cfg)
    else:
        model = assemble(layers, lowered, options, dtype, cfg)
    # what lowering knows of each head's keys travels with the model (attnsim.model.patterns)
    model.head_patterns = tuple(tuple(h.pattern for h in layer.heads) for layer in layers)
    return model


def count_parameters(model: Transformer | SparseTransformer) -> tuple[int, int]:
    """``(parameters, non-zero parameters)`` of a model (sparse storage: the parameters of
    its dense form, and its non-zero weights)."""
    if isinstance(model, SparseTransformer):
        itemsize = 8 if model.cfg.dtype == "float64" else 4
        return memory.weight_bytes(model.cfg) // itemsize, model.nonzero_weights()
    total = nonzero = 0
    for p in model.parameters():
        arr = p.detach().numpy()
        total += arr.size
        nonzero += int(np.count_nonzero(arr))
    return total, nonzero


def _factor(terms: tuple) -> tuple[int, bool]:
    """``(width, by_left)`` of a head's factors (``model.sparse_ops.factor_side``: the same
    rule for both storages)."""
    by_left, ident = factor_side(terms)
    return len(ident), by_left


def _fill(A: np.ndarray, B: np.ndarray, terms: tuple, plan: tuple[int, bool], ix) -> None:
    """Writes ``A B^T = sum_t w_t e_left e_right^T`` for the triples ``terms``.

    A and B are ``[d_model, width]`` (W_Q and W_K, or W_V and W_O^T): one factor holds one
    unit column per distinct direction of its side, the other the weights.
    """
    _, by_left = plan
    ident, weighted = (A, B) if by_left else (B, A)
    cols: dict[str, int] = {}
    rows, cols_w, rows_w, ws = [], [], [], []
    for left, right, wt in terms:
        key, other = (left, right) if by_left else (right, left)
        j = cols.get(key)
        if j is None:
            j = cols[key] = len(cols)
            rows.append(ix(key))
        rows_w.append(ix(other))
        cols_w.append(j)
        ws.append(wt)
    ident[rows, list(range(len(cols)))] = 1.0
    np.add.at(weighted, (rows_w, cols_w), ws)


def _fill_units(w, name_in: str, name_out: str, units, d_model: int, width: int, ix) -> None:
    """ReLU units: input forms into the columns of W_in, output forms into the rows of W_out."""
    if not units:
        return
    W_in = w(name_in, d_model, width)
    W_out = w(name_out, width, d_model)
    ri, ci, wi, ro, co, wo = [], [], [], [], [], []
    for ui, u in enumerate(units):
        for d, c in u.inputs:
            ri.append(ix(d))
            ci.append(ui)
            wi.append(c)
        for d, c in u.outputs:
            ro.append(ui)
            co.append(ix(d))
            wo.append(c)
    np.add.at(W_in, (ri, ci), wi)
    np.add.at(W_out, (ro, co), wo)


def _accumulate(arr: np.ndarray, rows: list[int], col: int, ws: list[float]) -> None:
    np.add.at(arr, (rows, [col] * len(rows)), ws)


def package(
    program: E.SOp,
    graph: tracing.Graph,
    lowered: LoweredProgram,
    sched: scheduling.Schedule,
    model: Transformer,
    checks: Sequence[GuardSpec],
    options: CompileOptions,
    start: float,
    chosen: precision.Precision | None = None,
) -> CompiledModel:
    """The CompiledModel: weights, residual labels, output read-out, checks and report.

    ``start`` is the ``time.perf_counter()`` at which compiling began (for the report);
    ``chosen`` the dtype and why (``precision.choose``), for the report.
    """
    layers = sched.layers
    vocab = lowered.vocab
    out = lowered.output
    if out.kind == "num":
        output = OutputSpec("num", form=tuple(sorted(out.form.items())))
    else:
        output = OutputSpec("cat", values=tuple(out.values), dims=tuple(out.dims))
    table = components.build(graph, lowered, layers)
    n_params, nonzero = count_parameters(model)
    report = Report(
        name=program.label,
        layers=len(layers),
        attention_layers=sum(1 for layer in layers if layer.heads),
        heads_per_layer=[len(layer.heads) for layer in layers],
        d_model=model.cfg.d_model,
        d_head=model.cfg.d_head,
        d_mlp=model.cfg.d_mlp,
        d_bilinear=model.cfg.d_bilinear,
        d_native=dict(model.cfg.d_native),
        parameters=n_params,
        nonzero_parameters=nonzero,
        compile_seconds=time.perf_counter() - start,
        attention=options.attention.value,
        realisations=[dict(vars(r)) for r in lowered.realisations],  # (flat: no deep copy)
        components=[c.to_dict() for c in table.rows],
        dtype="float64" if model.cfg.dtype == "float64" else "float32",
        dtype_reason="" if chosen is None else chosen.reason,
    )
    return CompiledModel(
        model,
        residual=lowered.residual,
        vocab=None if vocab is None else list(vocab),
        numerical_tokens=lowered.numerical_token_dir is not None,
        max_seq_len=lowered.max_seq_len,
        fixed_length=options.fixed_length or tracing.needs_full_length(graph),
        output=output,
        guards=checks,
        report=report,
    )
