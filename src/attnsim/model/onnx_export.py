"""Export a compiled model to ONNX, weights unchanged, and run it with ONNX Runtime.

Every compiled model exports: hard and softmax attention, causal or not, categorical and
numerical tokens, ReLU, bilinear and declared elementwise (native) MLP units, float64 and
float32. The graph uses Gather, MatMul, ReduceMax, comparisons, Concat, Relu, Softmax, Where
and elementwise operators (Exp, Log, Sqrt, Reciprocal, Tanh; Erf for gelu in float32).

| name             | shape                     | dtype                                      |
|------------------|---------------------------|--------------------------------------------|
| ``token_ids``    | ``[batch, pos]``          | int64; row 0 of ``W_E`` is BOS             |
| ``token_values`` | ``[batch, pos]``          | the model's; numerical tokens, 0 at BOS    |
| ``resid``        | ``[batch, pos, d_model]`` | the model's; the final residual stream     |

``batch`` is dynamic. ``pos`` counts BOS: it is dynamic up to ``max_seq_len + 1``, or
exactly ``max_seq_len + 1`` for a model compiled with ``fixed_length=True``. Both inputs are
always declared; a model without numerical tokens ignores ``token_values``.
:func:`run_onnx` encodes inputs and decodes ``resid`` exactly as :meth:`CompiledModel.run`
does, without its run-time checks on intermediate values (the graph returns the final
residual stream only).

The file's metadata (``metadata_props``) records :func:`fingerprint` of the model: a SHA-256
of its configuration, residual labels, vocabulary, output decoding and weights.
:func:`run_onnx` refuses a file whose fingerprint is not the model's, so a graph exported
from another model cannot silently return that model's outputs.

How: the Transformer's forward pass chooses its active heads and used columns from the
weights when it runs (cached Python-level plans keyed by data pointers, an in-place scatter
for sparse MLPs). The TorchScript-based exporter writes an invalid graph for that scatter
and the ``torch.export``-based one cannot read data pointers, so :func:`to_onnx` traces
:class:`StaticTransformer`: the same equations with the plans fixed once from the weights.
The TorchScript-based exporter (``dynamo=False``) turns it into plain operators; only sums
may be ordered differently, so outputs agree to rounding. ONNX Runtime's CPU provider has no
float64 Erf, so float64 gelu units compute erf from W. J. Cody's rational approximations
(within 3 ulps of ``torch.erf``).

ONNX and ONNX Runtime are the optional extra ``onnx`` (``pip install 'attnsim[onnx]'``);
they are imported only when :func:`to_onnx` or :func:`run_onnx` is called.

>>> from attnsim.compiler import compile_program
>>> from attnsim.rasp import library
>>> model = compile_program(library.make_hist(), vocab=["a", "b"], max_seq_len=4)
>>> static = StaticTransformer(model.model)
>>> ids, vals = model.encode([["a", "b", "a"]])
>>> bool((static(ids, vals) - model.forward(ids, vals)).abs().max() < 1e-12)
True
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnsim.model import compiled, digests
from attnsim.model.config import AttentionMode
from attnsim.model.hard import hard_selection
from attnsim.model.native import NATIVE_FUNCTIONS
from attnsim.model.stream import stamp
from attnsim.model.transformer import Transformer

__all__ = ["StaticTransformer", "erf64", "fingerprint", "to_onnx", "run_onnx", "OPSET"]

OPSET = 17  # ONNX opset of the exported graph (ONNX Runtime >= 1.14 runs it)
INPUTS = ("token_ids", "token_values")
OUTPUT = "resid"
FINGERPRINT_KEY = "attnsim.fingerprint"  # metadata_props key of fingerprint(model)
_FINGERPRINT_VERSION = b"attnsim-model-fingerprint-v1"

# model -> (a stamp of its weight tensors, their fingerprint): hashing is done once per state
_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _stamp(tensors: dict[str, torch.Tensor]) -> tuple:
    # data pointers and version counters change when a weight is replaced or edited in place
    return tuple((k, tuple(t.shape)) for k, t in tensors.items()), stamp(tensors.values())


def fingerprint(model: compiled.CompiledModel) -> str:
    """A SHA-256 (hex) of everything that decides the model's outputs.

    Covers the configuration, the residual labels, the vocabulary, the output decoding and
    every weight (names, dtypes, shapes, bytes). Two models share it only when they compute
    the same function the same way.

    Raises:
        TypeError: ``model`` is not a CompiledModel.

    >>> from attnsim.compiler import compile_program
    >>> from attnsim.rasp import library
    >>> a = compile_program(library.make_hist(), vocab=["a", "b"], max_seq_len=4)
    >>> b = compile_program(library.make_hist(), vocab=["a", "b"], max_seq_len=4)
    >>> c = compile_program(library.make_hist(), vocab=["a", "b"], max_seq_len=3)
    >>> fingerprint(a) == fingerprint(b) != fingerprint(c)
    True
    """
    if not isinstance(model, compiled.CompiledModel):
        raise TypeError(f"expected a CompiledModel, got {type(model).__name__}")
    tensors = dict(sorted(model.model.state_dict().items()))
    stamp = _stamp(tensors)
    cached = _FINGERPRINTS.get(model)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    parts = (
        model.config,
        model.residual,
        model.vocab,
        model.numerical_tokens,
        model.max_seq_len,
        model.fixed_length,
        model.output,
    )
    digest = digests.digest(_FINGERPRINT_VERSION, map(repr, parts), tensors)
    _FINGERPRINTS[model] = (stamp, digest)
    return digest


def _f64(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


# W. J. Cody's rational approximations of erf and erfc (Math. Comp. 23, 1969; Netlib
# specfun CALERF), evaluated as CALERF does
_ERF_A = _f64(3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
              3.20937758913846947e03, 1.85777706184603153e-1)  # fmt: skip
_ERF_B = _f64(2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
              2.84423683343917062e03)  # fmt: skip
_ERF_C = _f64(5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
              2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
              2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)  # fmt: skip
_ERF_D = _f64(1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
              1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
              3.43936767414372164e03, 1.23033935480374942e03)  # fmt: skip
_ERF_P = _f64(3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
              1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)  # fmt: skip
_ERF_Q = _f64(2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1,
              6.05183413124413191e-2, 2.33520497626869185e-3)  # fmt: skip
_INV_SQRT_PI = 5.6418958354775628695e-1


def _rational(t: torch.Tensor, num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num(t) / den(t) in Cody's nested form (den's leading coefficient is 1).

    The coefficients are float64 tensors, not Python floats: the TorchScript-based
    exporter merges scalar constants that are equal in float32 (C's and D's last ones are).
    """
    a = num.to(dtype=t.dtype, device=t.device)
    b = den.to(dtype=t.dtype, device=t.device)
    n = den.shape[0] - 1
    xnum, xden = a[-1] * t, t
    for i in range(n):
        xnum = (xnum + a[i]) * t
        xden = (xden + b[i]) * t
    return (xnum + a[n]) / (xden + b[n])


def erf64(z: torch.Tensor) -> torch.Tensor:
    """erf from Abs, Mul, Div, Exp, Floor and Where: within 3 ulps of ``torch.erf`` in float64.

    ONNX Runtime's CPU provider has no float64 Erf. Every branch is computed and one is
    selected per element, so the function traces to a fixed graph.

    >>> z = torch.linspace(-6, 6, 1001, dtype=torch.float64)
    >>> bool(((erf64(z) - torch.erf(z)).abs() <= 1e-15 * torch.erf(z).abs()).all())
    True
    """
    y = z.abs().clamp(max=27.0)  # erfc(27) underflows to 0 in float64; keeps inf finite
    small = z * _rational(y * y, _ERF_A, _ERF_B)  # |z| <= 0.46875: erf itself
    mid = _rational(y, _ERF_C, _ERF_D)  # 0.46875 < |z| <= 4: erfc(y) exp(y^2)
    t = 1.0 / (y * y)
    far = (_INV_SQRT_PI - t * _rational(t, _ERF_P, _ERF_Q)) / y  # |z| > 4: the same
    # exp(-y^2) with y^2 split as Cody does, so that its rounding error stays small
    head = torch.floor(y * 16.0) / 16.0
    erfc = torch.exp(-head * head) * torch.exp(-(y - head) * (y + head))
    erfc = erfc * torch.where(y <= 4.0, mid, far)
    return torch.where(y <= 0.46875, small, torch.sign(z) * (1.0 - erfc))


def _gelu(x: torch.Tensor) -> torch.Tensor:
    if x.dtype == torch.float64:
        return x * 0.5 * (1.0 + erf64(x * 0.7071067811865476))  # x * Phi(x), as torch does
    return nn.functional.gelu(x)  # exports as Erf, which ONNX Runtime runs in float32


# the torch model's elementwise units, with gelu's float64 erf replaced
_NATIVE = {**NATIVE_FUNCTIONS, "gelu": _gelu}


def _used(mask: torch.Tensor) -> torch.Tensor:
    """Indices where ``mask`` holds; index 0 when none does (no dimension ends up empty)."""
    idx = torch.nonzero(mask).flatten()
    return idx if len(idx) else torch.zeros(1, dtype=torch.long)


class _StaticAttention(nn.Module):
    """One attention layer's active heads, their unused query-key and value-output columns
    dropped. Shapes: W_Q, W_K [head, d_model, d_qk]; W_V [head, d_model, d_ov];
    W_O [head, d_ov, d_model]."""

    def __init__(self, attn: nn.Module) -> None:
        super().__init__()
        cfg = attn.cfg
        self.hard = cfg.attention is AttentionMode.HARD
        self.causal = cfg.causal
        self.beta = float(cfg.beta)
        self.tolerance = float(cfg.hard_tolerance)
        heads = torch.nonzero(attn.W_O.detach().flatten(1).abs().sum(dim=1) > 0).flatten()
        self.active = len(heads) > 0  # inactive layers add exactly 0 and are left out
        if not self.active:
            return
        wq, wk, wv, wo = (w.detach()[heads] for w in (attn.W_Q, attn.W_K, attn.W_V, attn.W_O))
        qk = _used((wq.abs() + wk.abs()).sum(dim=(0, 1)) > 0)  # columns any head uses
        ov = _used(wv.abs().sum(dim=(0, 1)) + wo.abs().sum(dim=(0, 2)) > 0)
        self.register_buffer("W_Q", wq[:, :, qk].clone())
        self.register_buffer("W_K", wk[:, :, qk].clone())
        self.register_buffer("W_V", wv[:, :, ov].clone())
        self.register_buffer("W_O", wo[:, ov].clone())
        n = cfg.n_ctx
        self.register_buffer("future", torch.ones(n, n, dtype=torch.bool).triu(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [batch, pos, d_model]
        n = x.shape[1]
        xh = x[:, None]  # [batch, 1, pos, d_model]: broadcasts over heads
        q = torch.matmul(xh, self.W_Q)  # [batch, head, pos, d_qk]
        k = torch.matmul(xh, self.W_K)
        v = torch.matmul(xh, self.W_V)  # [batch, head, pos, d_ov]
        scores = torch.matmul(q, k.transpose(-1, -2))  # [batch, head, query, key]
        if self.causal:
            scores = scores.masked_fill(self.future[:n, :n], float("-inf"))
        if self.hard:
            # the mean over the keys within the tolerance of the best score: one product sums
            # their values and (a column of ones) counts them, as the torch model does
            chosen = hard_selection(scores, self.tolerance).to(x.dtype)
            ones = torch.ones_like(v[..., :1])
            zc = torch.matmul(chosen, torch.cat([v, ones], dim=-1))  # [..., query, d_ov + 1]
            z = zc[..., :-1] / zc[..., -1:]
        else:
            z = torch.matmul(torch.softmax(self.beta * scores, dim=-1), v)
        return torch.matmul(z, self.W_O).sum(dim=1)  # [batch, pos, d_model]


class _StaticMLP(nn.Module):
    """One MLP layer: ReLU units on their non-zero input rows, then the bilinear units and
    the native kinds in use. Shapes: W_in [rows, d_mlp], W_out [d_mlp, d_model]."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        w_in, w_out = mlp.W_in.detach(), mlp.W_out.detach()
        rows = _used(w_in.abs().sum(dim=1) > 0)
        self.relu = bool((w_in != 0).any()) and bool((w_out != 0).any())
        self.register_buffer("rows", rows)
        self.register_buffer("W_in", w_in[rows].clone())
        self.register_buffer("W_out", w_out.clone())
        self.bilinear = bool((mlp.W_bil_out != 0).any())
        if self.bilinear:
            for name in ("W_bil_a", "W_bil_b", "W_bil_out"):
                self.register_buffer(name, getattr(mlp, name).detach().clone())
        self.kinds = [k for k in mlp.native_kinds if bool((getattr(mlp, f"W_{k}_out") != 0).any())]
        for kind in self.kinds:
            for part in ("in", "gate", "out"):
                name = f"W_{kind}_{part}"
                self.register_buffer(name, getattr(mlp, name).detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [batch, pos, d_model]
        out = torch.zeros_like(x)
        if self.relu:
            hidden = torch.relu(x[..., self.rows] @ self.W_in)  # [batch, pos, d_mlp]
            out = out + hidden @ self.W_out
        if self.bilinear:
            out = out + ((x @ self.W_bil_a) * (x @ self.W_bil_b)) @ self.W_bil_out
        for kind in self.kinds:
            pre = x @ getattr(self, f"W_{kind}_in")
            gate = x @ getattr(self, f"W_{kind}_gate")
            # the gate is 0 where the unit is unused (BOS): keep 0 * inf from becoming NaN
            val = torch.where(gate != 0, _NATIVE[kind](pre), torch.zeros_like(pre)) * gate
            out = out + val @ getattr(self, f"W_{kind}_out")
        return out


class StaticTransformer(nn.Module):
    """A Transformer's forward pass with its weight-dependent plans fixed, for export.

    Computes the final residual stream of ``src(token_ids, token_values)`` (to rounding:
    sums may be ordered differently) with operators that trace to a fixed graph: no data
    pointers, no data-dependent Python control flow, no in-place scatter.

    Args:
        src: the compiled Transformer. Its weights are copied: later changes to ``src`` do
            not reach this module.

    Raises:
        TypeError: ``src`` is not an attnsim Transformer.
    """

    def __init__(self, src: Transformer) -> None:
        super().__init__()
        if not isinstance(src, Transformer):
            raise TypeError(f"expected an attnsim Transformer, got {type(src).__name__}")
        self.cfg = src.cfg
        self.numerical = bool(src.cfg.numerical_tokens)
        self.register_buffer("W_E", src.W_E.detach().clone())
        self.register_buffer("W_E_num", src.W_E_num.detach().clone())
        self.register_buffer("W_pos", src.W_pos.detach().clone())
        self.vector = bool(src.cfg.token_width)
        if self.vector:  # vector tokens: token_values [batch, pos, width]
            self.register_buffer("W_E_vec", src.W_E_vec.detach().clone())
        self.attn = nn.ModuleList(_StaticAttention(b.attn) for b in src.blocks)
        self.mlp = nn.ModuleList(_StaticMLP(b.mlp) for b in src.blocks)

    def forward(self, token_ids: torch.Tensor, token_values: torch.Tensor) -> torch.Tensor:
        """token_ids, token_values [batch, pos] (vector tokens: [batch, pos, width]) -> the
        final residual stream [batch, pos, d_model]."""
        n = token_ids.shape[1]
        x = self.W_E[token_ids] + self.W_pos[:n]  # [batch, pos, d_model]
        if self.numerical:
            x = x + token_values.to(self.W_E.dtype)[..., None] * self.W_E_num
        if self.vector:
            x = x + token_values.to(self.W_E.dtype) @ self.W_E_vec
        for attn, mlp in zip(self.attn, self.mlp):
            if attn.active:
                x = x + attn(x)
            x = x + mlp(x)
        return x


def to_onnx(model: compiled.CompiledModel, path: str | Path, *, batch: int = 1) -> Path:
    """Writes ``model`` as an ONNX graph: token ids and values in, final residual stream out.

    Args:
        model: any compiled model.
        path: the ``.onnx`` file to write (parent folders are created).
        batch: the batch size of the example input that is traced; the batch axis of the
            graph is dynamic whatever it is.

    Returns:
        The path written. The graph is checked with ``onnx.checker`` before it is saved.

    Raises:
        TypeError: ``model`` is not a CompiledModel.
        ValueError: ``batch`` is not a positive integer.
        ImportError: ONNX is not installed (``pip install 'attnsim[onnx]'``).

    >>> from attnsim.compiler import compile_program
    >>> from attnsim.rasp import library
    >>> model = compile_program(library.make_hist(), vocab=["a", "b"], max_seq_len=4)
    >>> path = to_onnx(model, "hist.onnx")  # doctest: +SKIP
    >>> run_onnx(path, model, ["a", "b", "a"])  # doctest: +SKIP
    [2, 1, 2]
    """
    if not isinstance(model, compiled.CompiledModel):
        raise TypeError(f"expected a CompiledModel, got {type(model).__name__}")
    model.dense_only("the ONNX export")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("to_onnx needs ONNX: pip install 'attnsim[onnx]'") from exc
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    static = StaticTransformer(model.model).eval()
    cfg = model.config
    dtype = model.model.dtype
    ids = torch.full((batch, cfg.n_ctx), min(1, cfg.d_vocab - 1), dtype=torch.long)
    ids[:, 0] = 0  # BOS
    vals = torch.zeros(
        batch, cfg.n_ctx, *((cfg.token_width,) if cfg.token_width else ()), dtype=dtype
    )
    axes = {0: "batch"} if model.fixed_length else {0: "batch", 1: "pos"}
    kwargs = (
        {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    )
    with warnings.catch_warnings(), torch.no_grad():
        # torch >= 2.9 marks the TorchScript-based exporter deprecated; it is the one that
        # turns this module into plain operators with no extra dependency
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            static,
            (ids, vals),
            str(path),
            input_names=list(INPUTS),
            output_names=[OUTPUT],
            dynamic_axes={name: axes for name in (*INPUTS, OUTPUT)},
            opset_version=OPSET,
            do_constant_folding=True,
            **kwargs,
        )
    proto = onnx.load(str(path))
    graph = proto.graph
    if "token_values" not in {i.name for i in graph.input}:
        # the exporter drops an input the graph never reads; declare it anyway, so that
        # every exported model has the same two inputs
        values = onnx.ValueInfoProto()
        values.CopyFrom(graph.input[0])
        values.name = "token_values"
        elem = onnx.TensorProto.DOUBLE if dtype == torch.float64 else onnx.TensorProto.FLOAT
        values.type.tensor_type.elem_type = elem
        graph.input.append(values)
    proto.producer_name = "attnsim"
    onnx.helper.set_model_props(proto, {FINGERPRINT_KEY: fingerprint(model)})
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, str(path))
    return path


def run_onnx(
    path: Any, model: compiled.CompiledModel, xs: Sequence[Any], *, check: bool = True
) -> list:
    """Runs an exported graph with ONNX Runtime and decodes like ``model.run``.

    Args:
        path: the file :func:`to_onnx` wrote for ``model``, or an
            ``onnxruntime.InferenceSession`` of it (reuse one to run many batches).
        model: the compiled model (its encoding and output spec are used).
        xs: one token sequence, or a batch of equal-length sequences.
        check: refuse a graph whose recorded fingerprint is not ``fingerprint(model)``
            (False runs any graph with the right shapes: its outputs are decoded with
            ``model``'s output spec whatever model it came from).

    Returns:
        The decoded output (a list; a list of lists for a batch). The run-time checks of
        ``model.run`` on intermediate values are not made: the graph returns the final
        residual stream only.

    Raises:
        ValueError: the graph was exported from another model (or records no fingerprint),
            the inputs do not fit the model (see :meth:`CompiledModel.encode`), or the
            graph's output is not ``model``'s residual stream.
        TypeError: ``model`` is not a CompiledModel.
        ImportError: ONNX Runtime is not installed (``pip install 'attnsim[onnx]'``).
    """
    if not isinstance(model, compiled.CompiledModel):
        raise TypeError(f"expected a CompiledModel, got {type(model).__name__}")
    try:
        import onnxruntime
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("run_onnx needs ONNX Runtime: pip install 'attnsim[onnx]'") from exc
    if isinstance(path, onnxruntime.InferenceSession):
        session = path
    else:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    if check:
        _check_fingerprint(session, model, path)
    batch, single = model._batch(xs)
    ids, vals = model.encode(batch)
    feed = {"token_ids": ids.numpy(), "token_values": vals.to(model.model.dtype).numpy()}
    (resid,) = session.run([OUTPUT], feed)  # [batch, pos, d_model]
    if resid.shape[-1] != len(model.residual):
        raise ValueError(
            f"the graph returns {resid.shape[-1]} residual directions, the model has "
            f"{len(model.residual)}; run the file that to_onnx wrote for this model"
        )
    out = model._decode(torch.from_numpy(resid))
    return out[0] if single else out


def _check_fingerprint(session: Any, model: compiled.CompiledModel, path: Any) -> None:
    recorded = session.get_modelmeta().custom_metadata_map.get(FINGERPRINT_KEY)
    where = "the session's graph" if not isinstance(path, (str, Path)) else str(path)
    if recorded is None:
        raise ValueError(
            f"{where} records no attnsim fingerprint, so it cannot be checked against this "
            f"model; export the model with to_onnx (which records it) and run that file, or "
            f"pass check=False to run it unchecked"
        )
    mine = fingerprint(model)
    if recorded != mine:
        raise ValueError(
            f"{where} was exported from another model (fingerprint {recorded[:12]}..., this "
            f"model's is {mine[:12]}...), so its outputs would be that model's; run the file "
            f"that to_onnx wrote for this model"
        )
