"""The runtime: runs a compiled transformer faster than its definition, with the same outputs.

:mod:`attnsim.model.transformer` is the definition (every head over ``[query, key]``, every
unit) and keeps no executor state. A :class:`Runtime` runs one such model by one of the
executors and holds everything an executor keeps between calls, in one place: the plans per
input length (:mod:`attnsim.model.plans`, built once per length from the compiler's head
patterns and the static analysis), each layer's count of failed certificates and of
batches without repeated rows (:class:`LayerState`), and the feature-major executor's
prepared weights (:mod:`attnsim.model.fused`). All of it is keyed to the weights'
versions: changed weights start afresh (edited through the parameters, as ``with
torch.no_grad(): p.mul_(3)`` or ``load_state_dict``; an edit through ``p.data`` bypasses
the version torch keeps for ``p``: call :meth:`Runtime.forget` after one).

A model in sparse storage (:class:`attnsim.model.sparse.SparseTransformer`) runs under the
same runtime: the runtime keeps its plans per length (found by the storage's static pass),
its layers' failed tries and what the storage derives from a set of plans; the storage
runs them over its live columns (``executor`` "auto" and "plan" by the plans, "dense"
without; it has no feature-major pass). Called as a module, either storage runs its
definition.

The executors: "auto" (the default: short inputs feature-major where that costs less, the
others by the plans), "plan" (heads whose pattern only the length decides as gathers and
sparse sums, the others dense), "fused" (always feature-major), "dense" (the
definition) and "jit" (the feature-major pass compiled by torch's compiler, inductor,
:func:`attnsim.model.fused.jitted`: on the first call of each short input signature it is
compiled, seconds, and timed against the plans, and the faster is kept; longer inputs, and
weights made under ``torch.inference_mode()``, as "auto"). All give the definition's
outputs to rounding. A cache of every hook, forward hooks on a module (activation
patching), a pass that records gradients (the plans are constants made from the weights)
and inputs the plans were not made for (:func:`attnsim.model.stream.plans_hold`) run the
definition. A value that becomes non-finite inside the model (``1/0``) is the one place
where they part: the executors skip weights that are 0, where the definition's products
spread ``0 * inf = NaN``; ``CompiledModel.run`` and U raise on any non-finite stream.

Every executor runs on the model's device: what it builds and allocates follows the
weights' device and dtype (tests/test_device.py runs each with the default device set to
another, so that an allocation that does not follow fails). Off the CPU, "auto" runs the
definition: the cost table that chooses between the other executors was measured on CPUs
(``benchmarks/device_check.py`` times each executor on a GPU against the definition).

>>> import torch
>>> from attnsim import compile_program, library
>>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
>>> ids, _ = m.encode(["abba", "abab"])
>>> rt = Runtime(m.model, executor="plan")
>>> torch.equal(rt(ids), m.model(ids)), [type(p).__name__ for p in rt.plans(5)[0]]
(True, ['HeadPlan', 'TablePlan'])
"""

from __future__ import annotations

import time
import warnings

import torch

from attnsim.model import fused, plan_core, plan_steps, plans
from attnsim.model.costs import COMPILED_KEPT, MEASURED_RUNS, PLANS_KEPT, TABLE_BYTES, TRIES
from attnsim.model.plans import EXECUTORS, OPTIONAL_KINDS
from attnsim.model.projection import Projection, add_columns
from attnsim.model.stream import (
    Columns,
    _add,
    _capture,
    check_length,
    new_stream,
    plans_hold,
    stamp,
)

__all__ = ["EXECUTORS", "OPTIONAL_KINDS", "PLANS_KEPT", "LayerState", "Runtime"]


class LayerState:
    """What the plan executor learns about one layer between calls: ``misses`` (head, or
    (kind, head), -> how often its certificate failed or its rows were too many: after two
    the head runs dense without trying), ``_distinct_misses`` (batches whose MLP input
    rows were mostly distinct: after two the rows are no longer grouped) and
    ``mlp_written`` (the columns the MLP writes, with the slices they come from) and
    ``cache`` (the planned heads' weights, stacked once for the layer's plans)."""

    def __init__(self) -> None:
        self.misses: dict = {}
        self._distinct_misses = 0
        self.mlp_written: tuple | None = None
        self.cache: dict = {}  # the planned heads' stacked weights (attnsim.model.plans)


class Runtime:
    """Runs ``net`` (a :class:`attnsim.model.transformer.Transformer`) by ``executor``.

    Call it as the model: ``runtime(token_ids, token_values, cache=None, streams=None,
    keep=None)`` gives what ``net(...)`` gives (see ``Transformer.forward``).

    ``without``: kinds of plan (of :data:`OPTIONAL_KINDS`) this runtime does not build, their
    heads and units run by the next way that applies, with the same outputs (to measure
    what each kind buys: ``benchmarks/plan_kinds.py``); dense storage only.

    Raises:
        ValueError: an executor that is not one of :data:`EXECUTORS`; ``without`` other than
            a set of :data:`OPTIONAL_KINDS`, or given for a model in sparse storage.
    """

    def __init__(self, net, executor: str = "auto", without=frozenset()) -> None:
        self.sparse = getattr(net, "storage", "dense") == "sparse"
        if not self.sparse and not all(
            hasattr(net, a) for a in ("prepare_inputs", "embed", "blocks", "cfg")
        ):
            raise TypeError(
                "Runtime runs an attnsim Transformer (attnsim.model.transformer) or a model "
                f"in sparse storage (attnsim.model.sparse), got {type(net).__name__}"
            )
        self.net = net
        self.executor = executor
        without = () if without is None else without
        if isinstance(without, str) or not hasattr(without, "__iter__"):
            raise ValueError(
                f"without takes a set of kinds of {OPTIONAL_KINDS}, got {without!r}: name "
                "them in a set, say without={'table'}"
            )
        bad = set(without) - set(OPTIONAL_KINDS)
        if bad:
            raise ValueError(f"without takes kinds of {OPTIONAL_KINDS}, got {sorted(bad)}")
        if without and self.sparse:
            raise ValueError(
                f"without={sorted(without)} leaves out kinds of the dense storage's plans, and "
                "this model is in sparse storage (its plans have no such kinds): leave "
                "without out, or compile with storage='dense' to measure them"
            )
        self.without = frozenset(without)
        self._key: tuple | None = None
        self._modules, self._params = _walk(net)
        # a dict to fill with the seconds of each planned sublayer ("blocks.{l}.attn",
        # "blocks.{l}.mlp"), summed over calls (forward hooks would run the definition)
        self.profile: dict[str, float] | None = None
        # sparse storage: the most directions alive at once in the last planned call
        self.peak_columns: int | None = 0 if self.sparse else None
        self._reset(None)

    @property
    def executor(self) -> str:
        return self._executor

    @executor.setter
    def executor(self, value: str) -> None:
        if not isinstance(value, str) or value not in EXECUTORS:
            raise ValueError(f"executor must be one of {EXECUTORS}, got {value!r}")
        self._executor = value

    def _reset(self, key: tuple | None) -> None:
        self._key = key
        self._plans: dict = {}
        self._analysis = None
        self.layers = [LayerState() for _ in range(self.net.cfg.n_layers)]
        self.fused: dict = {}  # attnsim.model.fused's prepared weights and choices
        # what the sparse storage derives from a set of plans (attnsim.model.sparse)
        self.kept: dict = {}
        self._embedding: tuple | None = None
        # weights made under torch.inference_mode() (no version counter): reset every call
        self.inference = any(p.is_inference() for p in self._params)

    def current(self) -> None:
        """Drops what was kept for other weights: parameters or modules replaced, weights
        changed in place or moved (one walk over the modules, each call)."""
        self._modules, self._params = _walk(self.net)
        key = (tuple(map(id, self._params)), stamp(self._params))
        if key != self._key:
            self._reset(key)

    @property
    def params(self) -> list:
        return self._params

    def hooked(self) -> bool:
        """Whether a module of the model has forward hooks (they see the definition's
        sublayer outputs, so the definition runs)."""
        return any(m._forward_hooks or m._forward_pre_hooks for m in self._modules)

    def plans(self, n: int) -> list | None:
        """Per layer, the execution plans for inputs of ``n`` positions (BOS included), or
        None when no head's pattern is static and no MLP has step plans (the sparse
        storage: per layer, head -> plan). Built once per length and kept (the last
        :data:`PLANS_KEPT` lengths) until the weights change.

        >>> from attnsim import compile_program, library
        >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
        >>> [type(p).__name__ for p in Runtime(m.model).plans(5)[0]]
        ['HeadPlan', 'TablePlan']
        """
        self.current()
        return self._built(n)[0]

    def step_plans(self, n: int) -> list:
        """Per layer, the MLP's step plans for inputs of ``n`` positions (see
        :mod:`attnsim.model.plan_steps`), built with :meth:`plans`.

        >>> from attnsim import compile_program, library
        >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=20)
        >>> [(type(p).__name__, len(p.units)) for p in Runtime(m.model).step_plans(21)[0]]
        [('StepPlan', 40)]
        """
        self.current()
        return self._built(n)[1]

    def _built(self, n: int) -> tuple:
        """The plans for ``n`` positions, for the weights :meth:`current` last saw (the
        sparse storage: per layer, head -> plan, found by its static pass)."""
        if n not in self._plans:
            check_length(n, self.net.cfg.n_ctx)
            if len(self._plans) >= PLANS_KEPT:  # the least recently built length goes
                del self._plans[next(iter(self._plans))]
                self.kept.clear()  # (found again for the lengths kept)
            if self.sparse:
                self._plans[n] = (self.net.build_plans(n), [])
                return self._plans[n]
            if self._analysis is None:
                self._analysis = plans.StaticAnalysis.of(self.net, self.without)
            steps: list = []
            heads = plans.build_plans(self.net, n, self._analysis, steps=steps)
            self._plans[n] = (heads if any(heads) or any(steps) else None, steps)
        return self._plans[n]

    def forget(self) -> None:
        """Drops every plan and count kept (the next call builds them again)."""
        self._reset(None)

    def __call__(
        self,
        token_ids: torch.Tensor,
        token_values: torch.Tensor | None = None,
        cache: dict | None = None,
        streams: dict | None = None,
        keep: Columns | None = None,
    ) -> torch.Tensor:
        net, executor = self.net, self.executor
        self.current()
        if self.sparse:  # the sparse storage runs the plans this runtime keeps
            return net.run(token_ids, token_values, cache, streams, keep, self)
        defined = executor == "dense" or (executor == "auto" and net.W_E.device.type != "cpu")
        if defined or cache is not None or self.hooked():
            return net(token_ids, token_values, cache, streams, keep)
        token_ids, token_values, n = net.prepare_inputs(token_ids, token_values)
        reads_values = net.cfg.numerical_tokens or net.cfg.token_width
        # gradients are the definition's: the plans are constants made from the weights,
        # and the planned pass adds into its stream in place
        grads = torch.is_grad_enabled() and (
            (token_values is not None and token_values.requires_grad)
            or any(p.requires_grad for p in self.params)
        )
        if grads or not plans_hold(token_ids, token_values, reads_values):
            return net(token_ids, token_values, cache, streams, keep)
        jit = executor == "jit" and _compilable(self)  # the feature-major pass compiled
        if jit and not streams and fused.measured(self, n):
            return self._fastest(token_ids, token_values, keep, n)
        if fused.chosen(self, n):
            return fused.forward(self, token_ids, token_values, streams, keep, jit)
        return self._planned(token_ids, token_values, streams, keep, n)

    def _fastest(self, token_ids, token_values, keep, n: int) -> torch.Tensor:
        """``executor="jit"`` on a short input: the compiled feature-major pass or the
        plans, whichever ran faster on the first call of this input signature (each run
        once, the pass compiled and the plans built, then :data:`MEASURED_RUNS` times each
        in turn, the least time of each compared; kept with the prepared weights). The
        plans are timed as later calls run them (after :data:`TRIES` more runs, within
        which what their layers learn from failed certificates settles); afterwards what they
        learned (their layers' counts) and the sublayer profile are as after one call."""
        key = fused.signature(token_ids, token_values)
        runs = (
            lambda: fused.forward(self, token_ids, token_values, None, keep, True),
            lambda: self._planned(token_ids, token_values, None, keep, n),
        )
        choice = self.fused.get("fastest", {}).get(key)
        if choice is None:
            for run in runs:
                run()
            learned = [(dict(s.misses), s._distinct_misses) for s in self.layers]
            profile, self.profile = self.profile, None
            best = [float("inf")] * len(runs)
            try:
                # the plans as later calls run them: what a layer learns from failed
                # certificates and distinct rows settles within TRIES calls
                for _ in range(TRIES):
                    runs[1]()
                for _ in range(MEASURED_RUNS):
                    for i, run in enumerate(runs):
                        _finish(token_ids.device)  # (an accelerator runs asynchronously)
                        start = time.perf_counter()
                        run()
                        _finish(token_ids.device)
                        best[i] = min(best[i], time.perf_counter() - start)
            finally:
                for state, (misses, distinct) in zip(self.layers, learned):
                    state.misses, state._distinct_misses = dict(misses), distinct
                self.profile = profile
            kept = self.fused.setdefault("fastest", {})  # (a failed compile empties it)
            if len(kept) >= COMPILED_KEPT:  # the least recently measured signature goes
                del kept[next(iter(kept))]
            choice = kept[key] = best.index(min(best))
        return runs[choice]()

    def _planned(self, token_ids, token_values, streams, keep, n: int) -> torch.Tensor:
        """The planned pass of checked inputs (in parts where the batch is large)."""
        net = self.net
        b = token_ids.shape[0]
        step = plan_core.part_size(net, b, n, streams is None)
        if step < b:
            out = new_stream((b, n, net.cfg.d_model), net.dtype, net.W_E.device)
            for i in range(0, b, step):  # each part's stream is a slice of the output
                p, vals = slice(i, i + step), token_values
                self._run(token_ids[p], vals if vals is None else vals[p], None, n, out[p])
            return out if keep is None else out[..., keep.cols.to(out.device)]
        x = self._run(token_ids, token_values, streams, n)
        return x if keep is None else x[..., keep.cols.to(x.device)]

    def _run(self, token_ids, token_values, streams, n: int, out=None) -> torch.Tensor:
        """The planned pass on checked inputs (into ``out`` when given)."""
        net = self.net
        x = self._embed(token_ids, token_values, n, out)
        _capture(streams, 0, x)
        plan, steps = self._built(n)  # (__call__ has checked the weights)
        if plan is None:  # nothing to plan: the definition's blocks
            for i, block in enumerate(net.blocks):
                x = block(x, None, f"blocks.{i}", streams, 2 * i + 1)
            if out is not None and x is not out:
                out.copy_(x)
            return x
        clock = _Clock(self.profile)
        for i, block in enumerate(net.blocks):  # the planned path adds in place
            state = self.layers[i]
            attn = plans.planned_attention(
                block.attn, x, plan[i], compact=True, ids=token_ids, state=state
            )
            _add(x, attn)
            clock.lap(f"blocks.{i}.attn")
            _capture(streams, 2 * i + 1, x)
            _add(x, _mlp(block.mlp, x, steps[i], state))
            clock.lap(f"blocks.{i}.mlp")
            _capture(streams, 2 * i + 2, x)
        return x

    def _embed(self, token_ids, token_values, n: int, out=None) -> torch.Tensor:
        """The definition's embedding (``Transformer.embed``), each sum over the columns
        its weights write only: the position rows copied, then the token rows' non-zero
        columns, the numerical direction's and the vector channels' added there (the same
        sums in the same order; token values are finite here, :func:`plans_hold`)."""
        net, cfg = self.net, self.net.cfg
        if self._embedding is None:
            self._embedding = _embedding_parts(net)
        (e_cols, W_e), (n_cols, W_n), (v_cols, proj), table = self._embedding
        b, d = token_ids.shape[0], cfg.d_model
        x = new_stream((b, n, d), net.dtype, net.W_E.device) if out is None else out
        if table is not None:  # each (token, position) row summed once: one gather
            at = torch.add(table[1][:n], token_ids, alpha=cfg.n_ctx)  # t * n_ctx + p
            torch.index_select(table[0], 0, at.reshape(-1), out=x.view(b * n, d))
        else:
            x.copy_(net.W_pos[:n].expand(b, n, d))
            if len(e_cols):
                rows = torch.index_select(W_e, 0, token_ids.reshape(-1)).view(b, n, -1)
                add_columns(x, e_cols, rows)
        if token_values is not None and net.cfg.numerical_tokens and len(n_cols):
            add_columns(x, n_cols, token_values.to(x.dtype)[..., None] * W_n)
        if net.cfg.token_width and len(v_cols):
            add_columns(x, v_cols, proj(token_values.to(x.dtype)))
        return x


def _compilable(rt) -> bool:
    """Whether ``executor="jit"`` may compile for the runtime ``rt``: not where its weights
    were made under ``torch.inference_mode()``. Such tensors carry no version counter, so
    nothing derived from them can be kept between calls (:func:`stamp`) and a compiled
    pass would be compiled again, seconds, on every call; the model then runs uncompiled,
    as ``"auto"`` does, with a warning that says so.

    >>> from attnsim import compile_program, library
    >>> with torch.inference_mode():
    ...     m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     _compilable(Runtime(m.model, "jit")), "inference_mode" in str(w[0].message)
    (False, True)
    """
    if not rt.inference:
        return True
    warnings.warn(
        "executor='jit': this model's weights were made under torch.inference_mode(), "
        "where tensors keep no version counter, so a compiled pass could not be kept between "
        "calls; it runs uncompiled, as executor='auto'. Build or load the model outside "
        "inference mode (and run it inside) to compile it",
        RuntimeWarning,
        stacklevel=3,
    )
    return False


def _embedding_parts(net) -> tuple:
    """The embedding's non-zero columns: of the token rows (with those columns of ``W_E``),
    of the numerical direction (with its weights) and of the vector channels (with their
    product, as :class:`Projection` computes it); and, where it takes
    at most :data:`TABLE_BYTES`, the table of every token row plus every position row,
    ``W_E[t] + W_pos[p]`` at row ``t * n_ctx + p`` (the definition's first sum, made once)
    with the offsets ``p`` of the positions, else None."""
    W_E = net.W_E.detach()
    vocab, n_ctx = W_E.shape[0], net.cfg.n_ctx
    table = None
    if vocab * n_ctx * W_E.shape[1] * W_E.element_size() <= TABLE_BYTES:
        W_pos = net.W_pos.detach()
        rows = (W_E[:, None, :] + W_pos[None, :n_ctx, :]).reshape(vocab * n_ctx, -1)
        table = (rows, torch.arange(n_ctx, device=W_E.device))
    e_cols = torch.nonzero((W_E != 0).any(dim=0)).flatten()
    W_n = net.W_E_num.detach()
    n_cols = torch.nonzero(W_n != 0).flatten()
    v_cols = torch.zeros(0, dtype=torch.long, device=W_E.device)
    proj = None
    if net.cfg.token_width:
        W_v = net.W_E_vec.detach()
        v_cols = torch.nonzero((W_v != 0).any(dim=0)).flatten()
        proj = Projection(W_v[:, v_cols])
    return (e_cols, W_E[:, e_cols].contiguous()), (n_cols, W_n[n_cols]), (v_cols, proj), table


def _finish(device: torch.device) -> None:
    """Waits for the work queued on ``device`` (nothing to wait for on the CPU)."""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


class _Clock:
    """Adds the seconds since the last lap to ``profile[name]`` (nothing without one)."""

    def __init__(self, profile: dict | None) -> None:
        self.profile = profile
        self.last = time.perf_counter() if profile is not None else 0.0

    def lap(self, name: str) -> None:
        if self.profile is not None:
            now = time.perf_counter()
            self.profile[name] = self.profile.get(name, 0.0) + now - self.last
            self.last = now


def _walk(net) -> tuple[list, list]:
    """The modules of ``net`` and their parameters, in ``modules()`` order (the module
    dictionaries read directly: a forward pass does this once); none for the sparse
    storage, whose tensors are not parameters."""
    if not isinstance(net, torch.nn.Module):
        return [], []
    modules, params, todo = [], [], [net]
    while todo:
        m = todo.pop()
        modules.append(m)
        params.extend(p for p in m._parameters.values() if p is not None)
        todo.extend(c for c in reversed(m._modules.values()) if c is not None)
    return modules, params


def _mlp(mlp, x: torch.Tensor, steps: tuple, state: LayerState):
    """The MLP's update on the planned path: ``(cols, values)`` over the columns its units
    write where they write few (or it has step plans), else the definition's."""
    plan = mlp._plan()
    if steps or plan is not None or not mlp._relu_used():
        return plan_steps.compact(mlp, x, plan, steps, state)
    return mlp(x, None, "")
