"""Short inputs, feature-major: the dense forward pass with the residual stream stored as
``[d_model, pos, batch]``.

For short inputs the cost of a compiled model's forward pass is the fixed cost of its torch
operations, and the largest of those are the projections ``x W`` of a tall
``[batch * pos, d_model]`` stream by a narrow ``[d_model, width]`` weight: MKL runs the
same product about five times faster as ``W^T x^T``, with the long axis last (measured on
the benchmark machine, one thread: ``[1536, 13] @ [13, 5]`` 23 us, ``[5, 13] @ [13, 1536]``
4.8 us). Batched products of tiny ``[pos, pos]`` matrices cost more than their arithmetic
too, so each head's scores and mixed values are broadcast sums over the few columns a head
uses.

The equations are the definition's (``Transformer.forward``): every
active head over ``[query, key]`` (hard attention's mean over the keys within the tolerance
of the best score, or softmax), then every ReLU, bilinear and declared unit, each product
over the residual rows its weights read and write. A layer whose every head selects one key
per query on every input of the length (its plan, hard attention) takes that key's value,
as the dense mean of one value is; a layer whose every head's keys are so fixed, more than
one per query, takes their mean as the product of the values by the 0/1 selection over the
count (no scores). Only the order in which a sum's terms are added differs,
so outputs agree with the dense forward to rounding (exactly, where every partial sum is
exact, as in integer-valued programs).
A runtime (:class:`attnsim.model.runtime.Runtime`) with ``executor="fused"`` runs every
input this way; the default ``"auto"`` runs an input so where :func:`applies` says it costs
less than the plans, and the plans otherwise. The weights are prepared once and kept in the
runtime (``Runtime.fused``) until they change.

>>> import torch
>>> from attnsim import compile_program, library
>>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
>>> ids, _ = m.encode(["abba", "abab"])
>>> from attnsim.model.runtime import Runtime
>>> rt = Runtime(m.model)
>>> bool(applies(rt, ids.shape[1])), bool(torch.equal(rt(ids), m.model(ids)))
(True, True)
"""

from __future__ import annotations

import warnings

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from attnsim.model.config import AttentionMode
from attnsim.model.costs import (
    BROADCAST_VALUES,
    COMPILED_KEPT,
    DENSE_SHARE,
    DENSE_WIDTH,
    FUSED_CONST_WORK,
    FUSED_MAX_D_MODEL,
    FUSED_MAX_POSITIONS,
    FUSED_MAX_WORK,
    FUSED_STATIC_QUADRATIC,
    FUSED_STATIC_WORK,
    ONE_HOT_MIN_WIDTH,
    ONE_HOT_VOCAB,
)
from attnsim.model.hard import hard_selection
from attnsim.model.native import NATIVE_FUNCTIONS
from attnsim.model.stream import _capture  # a [batch, pos, d_model] view is passed

__all__ = ["applies", "chosen", "forward", "jitted", "measured", "signature"]


def chosen(rt, n: int) -> bool:
    """Whether the runtime ``rt`` runs a forward pass on ``n`` positions feature-major:
    always with ``executor="fused"``; with "auto" and "jit" where :func:`applies` (a pass
    that records gradients runs the definition, :class:`attnsim.model.runtime.Runtime`).

    >>> from attnsim import compile_program, library
    >>> from attnsim.model.runtime import Runtime
    >>> net = compile_program(library.make_hist(), vocab="ab", max_seq_len=5).model
    >>> [chosen(Runtime(net, e), n) for e, n in (("auto", 6), ("plan", 6), ("fused", 60))]
    [True, False, True]
    """
    executor = rt.executor
    if executor not in ("auto", "fused", "jit"):
        return False
    return executor == "fused" or _applies(rt, n)


def measured(rt, n: int) -> bool:
    """Whether ``executor="jit"`` times the compiled feature-major pass against the plans
    for an input of ``n`` positions and takes the faster (``Runtime._fastest``): inputs
    within the feature-major limits (:data:`FUSED_MAX_POSITIONS`,
    :data:`FUSED_MAX_D_MODEL`).

    >>> from attnsim import compile_program, library
    >>> from attnsim.model.runtime import Runtime
    >>> rt = Runtime(compile_program(library.make_hist(), vocab="ab", max_seq_len=5).model)
    >>> measured(rt, 6), measured(rt, 40)
    (True, False)
    """
    return n <= FUSED_MAX_POSITIONS and rt.net.cfg.d_model <= FUSED_MAX_D_MODEL


def signature(token_ids: torch.Tensor, token_values) -> tuple:
    """What a compiled pass, and the choice measured for it, is kept for: the CPU threads
    (inductor writes their number into its kernels) and the shapes, strides and dtypes of
    the inputs.

    >>> ids = torch.zeros(4, 6, dtype=torch.long)
    >>> sig = signature(ids, None)
    >>> sig[1:], sig == signature(ids.clone(), None), sig == signature(ids[:2], None)
    ((((4, 6), (6, 1), torch.int64),), True, False)
    """
    inputs = (token_ids,) if token_values is None else (token_ids, token_values)
    return (torch.get_num_threads(), *((tuple(t.shape), t.stride(), t.dtype) for t in inputs))


def applies(rt, n: int) -> bool:
    """Whether the plan executor runs an input of ``n`` positions (BOS included)
    feature-major: short inputs of a model whose work there is small, unless its plans make
    the heads cheaper. The rule, calibrated on tracr's library at lengths 5 to 20 (one
    thread, batch 256): a layer whose every head has fixed keys on its plan (a one-key
    gather, or a mean over fixed keys) runs so feature-major too (no scores); heads that
    only add a constant (``ConstPlan``) go planned, unless the rest have such fixed keys and
    the pass is under ``FUSED_CONST_WORK`` multiply-adds per sequence; with other heads the
    plans run as gathers, feature-major only while the whole pass is under
    ``FUSED_STATIC_WORK`` and those heads' dense ``[query, key]`` work under
    ``FUSED_STATIC_QUADRATIC``; otherwise while the pass is under ``FUSED_MAX_WORK``.

    >>> from attnsim import compile_program, library, rasp
    >>> from attnsim.model.runtime import Runtime
    >>> hist = Runtime(compile_program(library.make_hist(), vocab="ab", max_seq_len=5).model)
    >>> length = compile_program(rasp.numerical(library.make_length()), vocab="ab", max_seq_len=5)
    >>> applies(hist, 6), applies(Runtime(length.model), 6), applies(hist, 40)
    (True, False, False)
    """
    rt.current()
    return _applies(rt, n)


def _applies(rt, n: int) -> bool:
    """:func:`applies` for a runtime that has just checked its weights."""
    net = rt.net
    if n > FUSED_MAX_POSITIONS or net.cfg.d_model > FUSED_MAX_D_MODEL:
        return False
    got = rt.fused.setdefault("choice", {})
    if n not in got:
        got[n] = _cheaper(rt, n, _layers(rt), _patterns(rt, n))
    return got[n]


def _cheaper(rt, n: int, layers: list, patterns: list) -> bool:
    net = rt.net
    scale = 2 if net.cfg.dtype == "float64" else 1
    work, d = 0, net.cfg.d_model
    for (att, units), fixed in zip(layers, patterns):
        if att is not None:
            H, wq, wv, qkv, W_O = att
            # the dense products' sizes (the rule was calibrated on them); a layer of
            # gathers has no [query, key] work, one of fixed keys the values' mean only
            work += n * d * (qkv[0].shape[0] + W_O[0].shape[1])
            if fixed is None:
                work += H * (2 * wq + 2 * wv) * n * n
            elif isinstance(fixed, tuple):
                work += H * wv * n * n
        work += sum(n * d * (w_in[0].shape[0] + w_out[0].shape[1]) for _, w_in, w_out in units)
    work *= scale
    plans = rt.plans(n) or [() for _ in net.blocks]
    quadratic, const, other = 0, 0, 0
    for block, layer_plans, fixed in zip(net.blocks, plans, patterns):
        heads, qk, ov = block.attn._plan()
        if fixed is not None:  # fixed keys feature-major too
            continue
        done = set()
        for p in layer_plans:
            if p.kind == "const":
                const += len(p.heads)
                done.update(p.heads)
            elif p.kind == "head":  # its keys fixed (not candidates)
                quadratic += int(qk[p.head] + ov[p.head]) * n * n * scale
                done.add(p.head)
        other += len(set(heads.tolist()) - done)
    if const and not quadratic and not other:  # constants (the plans add them), gathers
        fixed = any(g is not None for g in patterns)
        return fixed and work <= FUSED_CONST_WORK
    if quadratic:
        return work <= FUSED_STATIC_WORK and quadratic <= FUSED_STATIC_QUADRATIC
    return work <= FUSED_MAX_WORK


def _stack(W: torch.Tensor, heads: torch.Tensor, width: int) -> torch.Tensor:
    """The heads' first ``width`` columns of ``W [head, d_model, d_head]``, stacked as
    ``[head * width, d_model]``."""
    return W[heads, :, :width].permute(0, 2, 1).reshape(-1, W.shape[1]).contiguous()


def _prepare(net) -> list:
    """Per layer: the attention's stacked projections and output, and the MLP's units,
    transposed for products with the long axis last."""
    layers = []
    for block in net.blocks:
        attn, mlp = block.attn, block.mlp
        heads, qk, ov = attn._plan()
        att = None
        if len(heads):
            wq, wv = max(1, int(qk[heads].max())), max(1, int(ov[heads].max()))

            parts = [(attn.W_Q, wq), (attn.W_K, wq), (attn.W_V, wv)]
            qkv = _reading(torch.cat([_stack(W, heads, width) for W, width in parts]))
            W_O = _writing(attn.W_O[heads, :wv].reshape(-1, attn.W_O.shape[2]).T)
            att = (len(heads), wq, wv, qkv, W_O)
        units = []
        used = torch.nonzero((mlp.W_out != 0).any(dim=1)).flatten()
        if len(used):
            units.append(("relu", mlp.W_in[:, used].T, mlp.W_out[used].T))
        groups = [("bilinear", mlp.W_bil_a, mlp.W_bil_b, mlp.W_bil_out)]
        for kind in mlp.native_kinds:
            groups.append((kind, *(getattr(mlp, f"W_{kind}_{p}") for p in ("in", "gate", "out"))))
        for kind, a, b, w_out in groups:
            if a.shape[1]:
                units.append((kind, torch.cat([a, b], dim=1).T, w_out.T))
        layers.append((att, [(k, _reading(i), _writing(o)) for k, i, o in units]))
    return layers


def _reading(W: torch.Tensor) -> tuple:
    """``W [rows, d_model]`` as ``(W on the residual rows it reads, those rows or None for
    all)``: a product over the rows read only (the others would add exact zeros)."""
    reads = torch.nonzero((W != 0).any(dim=0)).flatten()
    if not len(reads):  # reads nothing: one row of zero weights keeps the shapes
        reads = torch.zeros(1, dtype=torch.long, device=W.device)
    if W.shape[1] <= DENSE_WIDTH or len(reads) > DENSE_SHARE * W.shape[1]:
        return W.detach().contiguous(), None
    return W[:, reads].detach().contiguous(), reads


def _writing(W: torch.Tensor) -> tuple:
    """``W [d_model, width]`` as ``(W on the residual rows it writes, those rows or None)``."""
    writes = torch.nonzero((W != 0).any(dim=1)).flatten()
    if W.shape[0] <= DENSE_WIDTH or len(writes) > DENSE_SHARE * W.shape[0]:
        return W.detach().contiguous(), None
    return W[writes].detach().contiguous(), writes


def _read(W: tuple, x: torch.Tensor) -> torch.Tensor:
    """``W x`` over the rows ``W`` reads (see :func:`_reading`): ``[rows, pos, batch]``."""
    w, reads = W
    return _mm(w, x if reads is None else x.index_select(0, reads))


def _write(W: tuple, z: torch.Tensor, x: torch.Tensor) -> None:
    """Adds ``W z`` to the stream ``x`` in place, on the rows ``W`` writes."""
    w, writes = W
    if writes is None:
        x += _mm(w, z)
    elif len(writes):
        x.index_add_(0, writes, _mm(w, z))


def _patterns(rt, n: int) -> list:
    """Per layer, what the plans fix of its heads on every input of ``n`` positions (hard
    attention), kept per length until the weights change: ``keys [head, pos]`` where every
    active head selects one key per query (a gather); ``(select [head, 1, query, key],
    count [head, 1, query, 1])`` where every active head's keys are fixed (the mean over
    them: a product by the 0/1 selection, divided by the count); else None."""
    net = rt.net
    got = rt.fused.setdefault("patterns", {})
    if n not in got:
        plans = rt.plans(n) if net.cfg.attention is AttentionMode.HARD else None
        plans = plans or [() for _ in net.blocks]
        out: list = []
        for block, layer_plans in zip(net.blocks, plans):
            heads = block.attn._plan()[0].tolist()
            found = {p.head: p for p in layer_plans if p.kind == "head"}
            if not heads or not all(h in found for h in heads):
                out.append(None)
            elif all(found[h].gather for h in heads):
                out.append(torch.stack([found[h].keys for h in heads]))
            else:
                select = torch.stack([found[h].dense(net.dtype) != 0 for h in heads])
                select = select.to(net.dtype)[:, None]  # [head, 1, query, key]
                out.append((select, select.sum(dim=3, keepdim=True)))
        got[n] = out
    return got[n]


def _layers(rt) -> list:
    if "layers" not in rt.fused:
        rt.fused["layers"] = _prepare(rt.net)
    return rt.fused["layers"]


def _mm(W: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``W [rows, d] @ x [d, pos, batch]`` -> ``[rows, pos, batch]``."""
    return (W @ x.reshape(x.shape[0], -1)).view(W.shape[0], *x.shape[1:])


def _attention(cfg, att: tuple, x: torch.Tensor, pattern=None) -> None:
    """Adds the attention sublayer's output to the stream ``x [d_model, pos, batch]``;
    ``pattern``: the layer's heads' keys, fixed on every input of this length (their plans,
    hard attention, :func:`_patterns`): one key per query (its mean is that key's value) or
    a 0/1 selection and its counts (the mean is their product by the values over the count):
    no scores needed."""
    H, wq, wv, qkv, W_O = att
    _, n, b = x.shape
    if pattern is not None:  # the values only
        w, reads = qkv
        v = _mm(w[2 * H * wq :], x if reads is None else x.index_select(0, reads))
        v = v.view(H, wv, n, b)
        if isinstance(pattern, tuple):  # the sum over the selected keys, over their count
            select, count = pattern
            z = torch.matmul(select, v).div_(count)
        else:  # the mean of one value is that value
            z = torch.stack([v[h].index_select(1, pattern[h]) for h in range(H)])
        _write(W_O, z.reshape(H * wv, n, b), x)
        return
    proj = _read(qkv, x)
    v = proj[2 * H * wq :].view(H, wv, n, b)
    q = proj[: H * wq].view(H, wq, n, b)
    k = proj[H * wq : 2 * H * wq].view(H, wq, n, b)
    if H * max(wq, wv) * b * n * n <= BROADCAST_VALUES:  # [H, query, key, B]
        scores = (q[:, :, :, None, :] * k[:, :, None, :, :]).sum(dim=1)
    else:
        scores = torch.matmul(q.permute(0, 3, 2, 1), k.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
    if cfg.causal:
        future = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)[:, :, None]
        scores = scores.masked_fill(future, float("-inf"))
    if cfg.attention is AttentionMode.HARD:
        # in place: 1.0 where selected, else 0.0
        weights = hard_selection(scores, cfg.hard_tolerance, dim=2, inplace=True)
        count = weights.sum(dim=2)  # [H, query, B]
    else:
        weights = torch.softmax(cfg.beta * scores, dim=2)
        count = None
    if H * wv * b * n * n <= BROADCAST_VALUES:
        z = (weights[:, None] * v[:, :, None, :, :]).sum(dim=3)  # [H, wv, query, B]
    else:
        w = weights.permute(0, 3, 1, 2)  # [H, B, query, key]
        z = torch.matmul(w, v.permute(0, 3, 2, 1)).permute(0, 3, 2, 1)
    if count is not None:
        z = z.div_(count[:, None])  # z is a new tensor
    _write(W_O, z.reshape(H * wv, n, b), x)


def _mlp(units: list, x: torch.Tensor) -> None:
    """Adds the MLP's output to the stream ``x``: every unit reads ``x`` before any adds."""
    vals = []
    for kind, W_in, W_out in units:
        pre = _read(W_in, x)
        if kind == "relu":
            val = torch.relu(pre)
        else:
            a, b = pre.chunk(2, dim=0)
            if kind == "bilinear":
                val = a * b
            else:  # the gate is 0 where the unit is unused (BOS): 0 * inf stays 0
                val = torch.where(b != 0, NATIVE_FUNCTIONS[kind](a), torch.zeros_like(a)) * b
        vals.append((W_out, val))
    for W_out, val in vals:
        _write(W_out, val, x)


def forward(
    rt,
    token_ids: torch.Tensor,
    token_values: torch.Tensor | None,
    streams: dict | None = None,
    keep=None,
    compiled: bool = False,
) -> torch.Tensor:
    """The final residual stream ``[batch, pos, d_model]`` (or its ``keep`` columns), as
    the definition computes it, with the stream feature-major in between, for the runtime
    ``rt``'s model. Inputs are checked by the caller (``Runtime.__call__``); ``streams`` and
    ``keep`` as in ``Transformer.forward``. ``compiled`` (``executor="jit"``): the pass as
    torch's compiler made it (:func:`jitted`), unless stages are asked for in ``streams``
    or the token values need gradients.

    >>> import torch
    >>> from attnsim import compile_program, library
    >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    >>> ids, _ = m.encode(["abba"])
    >>> from attnsim.model.runtime import Runtime
    >>> bool(torch.allclose(forward(Runtime(m.model), ids, None), m.model(ids)))
    True
    """
    net = rt.net
    E = rt.fused.get("embed")  # (the caller has dropped what was kept for other weights)
    if E is None:
        W_vec = net.W_E_vec.detach().T if net.cfg.token_width else None
        W_num = net.W_E_num.detach() if net.cfg.numerical_tokens else None
        E = (net.W_E.detach().T.contiguous(), net.W_pos.detach().T, W_num, W_vec)
        rt.fused["embed"] = E
    cfg, layers, patterns = net.cfg, _layers(rt), _patterns(rt, token_ids.shape[1])
    x = None
    if compiled and not streams:  # (a pass that records gradients runs the definition)
        x = jitted(rt, (cfg, E, layers, patterns, token_ids, token_values))
    if x is None:
        x = _embed(E, token_ids, token_values)
        if streams:
            _capture(streams, 0, x.permute(2, 1, 0))
        # the sublayers' temporaries need no version counters or view tracking: inference
        # mode, where nothing records gradients; the stream x stays an ordinary tensor (it
        # is only written in place there), as do the copies _capture takes
        with torch.inference_mode(not torch.is_grad_enabled()):
            _sublayers(cfg, layers, patterns, x, streams)
    out = x.permute(2, 1, 0)  # a view: [batch, pos, d_model], not contiguous
    return out if keep is None else out[..., keep.cols.to(out.device)]


def _embed(E: tuple, token_ids: torch.Tensor, token_values) -> torch.Tensor:
    """The embedding ``[d_model, pos, batch]`` (``E``: ``W_E`` and ``W_pos`` transposed,
    the numerical direction or None, ``W_E_vec`` transposed or None)."""
    b, n = token_ids.shape
    W_E, W_pos, W_num, W_vec = E
    idx = token_ids.T.reshape(-1)
    d, vocab = W_E.shape
    if d > ONE_HOT_MIN_WIDTH and vocab <= ONE_HOT_VOCAB:  # exact: one 1 per column
        one_hot = (idx[None, :] == torch.arange(vocab, device=idx.device)[:, None]).to(W_E.dtype)
        x = (W_E @ one_hot).view(d, n, b)
    else:
        x = torch.index_select(W_E, 1, idx).view(d, n, b)  # a new tensor
    x += W_pos[:, :n, None]
    if token_values is not None and W_num is not None:
        x += W_num[:, None, None] * token_values.T.to(x.dtype)[None]
    if W_vec is not None:
        vals = token_values.to(x.dtype).transpose(0, 1).reshape(n * b, -1)
        x += (W_vec @ vals.T).view(-1, n, b)
    return x


def _sublayers(cfg, layers: list, patterns: list, x: torch.Tensor, streams) -> None:
    """Adds every sublayer's output to the stream ``x [d_model, pos, batch]`` in turn."""
    for i, (att, units) in enumerate(layers):
        if att is not None:
            _attention(cfg, att, x, patterns[i])
        if streams:
            with torch.inference_mode(False):
                _capture(streams, 2 * i + 1, x.permute(2, 1, 0))
        _mlp(units, x)
        if streams:
            with torch.inference_mode(False):
                _capture(streams, 2 * i + 2, x.permute(2, 1, 0))


def _whole(cfg, E: tuple, layers: list, patterns: list, token_ids, token_values):
    """The whole pass, ``[d_model, pos, batch]``: what :func:`jitted` compiles."""
    x = _embed(E, token_ids, token_values)
    _sublayers(cfg, layers, patterns, x, None)
    return x


def jitted(rt, args: tuple) -> torch.Tensor | None:
    """The pass :func:`_whole` of ``args`` as torch's compiler (inductor) made it for the
    runtime ``rt``; where torch cannot compile it here (no C++ compiler, say) the pass
    uncompiled, with a warning that says why, once, and None on later calls (the runtime's
    passes run uncompiled from then on). An error the uncompiled pass raises too is the
    input's, and is raised as it is.

    Each input signature (the shapes, strides and dtypes of the token ids and values) is
    compiled once, on its first call (seconds; inductor keeps what it built on disk, so a
    later process compiles the same pass faster), and kept in the runtime with its other
    prepared weights, which drops it when the weights change (the last
    :data:`COMPILED_KEPT`). What the compiler is handed is the graph of the pass's torch
    operations (:func:`_compile`), the weights among its inputs: a call runs that compiled
    graph directly, with no tracing of Python and no guards between the runtime and the
    kernels (the runtime has already checked the inputs and keyed the graph to their
    signature and to the weights). The compiled code may add a sum's terms in another order
    than the uncompiled pass (the same rounding tolerance; integer-valued float32 programs
    are exact either way).

    >>> import torch
    >>> from attnsim import compile_program, library
    >>> from attnsim.model.runtime import Runtime
    >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    >>> ids, _ = m.encode(["abba", "abab"])
    >>> rt = Runtime(m.model, "jit")
    >>> with torch.no_grad():  # compiled on this first call (uncompiled where torch cannot)
    ...     bool(torch.allclose(rt(ids), m.model(ids)))
    True
    """
    cfg, E, layers, patterns, token_ids, token_values = args
    kept = rt.fused.setdefault("jit", {})
    if kept is False:
        return None
    inputs = (token_ids,) if token_values is None else (token_ids, token_values)
    key = signature(token_ids, token_values)
    got = kept.get(key)
    if got is not None:
        return got[0](*inputs, *got[1])
    try:
        fn, weights = _compile(cfg, (E, layers, patterns), inputs)
        out = fn(*inputs, *weights)
    except Exception as exc:  # noqa: BLE001 - torch's compiler stack raises many kinds
        # the pass uncompiled: an error of the input's own is raised here, as it would be
        # without compiling, and the compiled passes stay
        with torch.no_grad():
            out = _whole(cfg, E, layers, patterns, token_ids, token_values)
        rt.fused["jit"] = False  # (the passes compiled before go: choices made on them too)
        rt.fused.pop("fastest", None)
        reason = str(exc).strip().splitlines()
        warnings.warn(
            "executor='jit': torch could not compile here, so this model's feature-major "
            f"pass runs uncompiled ({type(exc).__name__}: "
            f"{reason[0][:200] if reason else ''}); torch's compiler needs a C++ compiler "
            "on the CPU (g++ or clang): install one, or use executor='auto' to skip "
            "compiling",
            RuntimeWarning,
            stacklevel=3,
        )
        return out
    if len(kept) >= COMPILED_KEPT:  # the least recently compiled signature goes
        del kept[next(iter(kept))]
    kept[key] = (fn, weights)
    return out


def _compile(cfg, prepared: tuple, inputs: tuple) -> tuple:
    """``(fn, weights)``: :func:`_whole` over the prepared weights ``prepared`` (``(E,
    layers, patterns)``) and the token ``inputs`` (ids, and values where given), compiled
    by inductor as ``fn(*inputs, *weights)``. The pass is traced once into a graph of torch
    operations (``make_fx``, on these inputs' shapes: the model's structure, its widths and
    the length decide every branch of the pass), which ``torch._inductor.compile`` turns
    into fused C++ kernels and library products. Torch's deprecation notices about its own
    internals, raised while it loads and compiles, are not passed on (nothing a caller can
    change)."""
    weights: list = []
    shape = _split(prepared, weights)
    with_values = len(inputs) == 2

    def whole(*tensors):
        E, layers, patterns = _fill(shape, tensors[len(inputs) :])
        values = tensors[1] if with_values else None
        return _whole(cfg, E, layers, patterns, tensors[0], values)

    example = [*inputs, *weights]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import torch._inductor as inductor  # torch's compiler: loaded (about 2 s) when asked

        graph = make_fx(whole)(*example)
        return inductor.compile(graph, example), weights


def _split(obj, tensors: list):
    """``obj`` (tuples and lists of tensors and constants) with each tensor replaced by
    its index in ``tensors``, where it is appended."""
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return _Slot(len(tensors) - 1)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_split(o, tensors) for o in obj)
    return obj


def _fill(shape, tensors):
    """The inverse of :func:`_split`: ``shape`` with each slot replaced by its tensor."""
    if isinstance(shape, _Slot):
        return tensors[shape.index]
    if isinstance(shape, (tuple, list)):
        return type(shape)(_fill(o, tensors) for o in shape)
    return shape


class _Slot:
    """Where :func:`_split` took a tensor out."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index
