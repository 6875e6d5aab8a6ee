"""The reference interpreter: exact, vectorised RASP semantics (the project's oracle).

Values inside the interpreter (glossary: batch, n = sequence length):

- a numerical S-op is a float64 array ``[batch, n]``;
- a categorical S-op is a :class:`Cat`: integer codes ``[batch, n]`` into a table of distinct
  Python values, so every user function runs once per distinct value (or pair of values),
  never once per position;
- a selector is a boolean array ``[batch, n_query, n_key]``, or ``[1, n_query, n_key]`` when
  it is the same for every sequence of the batch (a selector on indices, say); consumers
  broadcast it.

Semantics (the same in the compiled models, and tracr's ``DefaultRASPEvaluator``'s):

- ``Map`` gives None where its input is None, ``SequenceMap`` where any input is, without
  calling the function (None is "no value", what an empty categorical aggregate gives); a
  numerical S-op cannot hold None (an error names it);
- ``Select(keys, queries, p)`` selects key k for query q when ``p(keys[k], queries[q])``;
- ``Aggregate`` is the mean (or sum) over the selected keys; an empty selection gives the
  default (numerical: 0 unless given; categorical: None unless given); a categorical
  aggregate over several distinct values is an error;
- ``SelectorWidth`` counts the selected keys;
- ``SelectMax(base, score)`` keeps, among the keys ``base`` selects, those whose numerical
  score is the largest (ties all kept; an empty ``base`` selection stays empty);
- causal mode: each query sees only keys at positions <= its own, and ``length`` is then the
  prefix length i+1 (what a causal model can know).

>>> from attnsim import rasp
>>> hist = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
>>> rasp.evaluate(hist, ["a", "b", "a"])
[2, 1, 2]
>>> rasp.evaluate(hist, [["a", "b", "a"], ["c", "c", "c"]])
[[2, 1, 2], [3, 3, 3]]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from attnsim.rasp import columns
from attnsim.rasp import expr as E
from attnsim.rasp.columns import Cat, RASPEvaluationError
from attnsim.values import (
    as_token,
    as_truth,
    is_hashable,
    not_in_vocab_message,
    value_key,
)

# names that other layers read from this module
_as_python_number = columns.as_python_number

__all__ = [
    "evaluate",
    "evaluate_batch",
    "Cat",
    "RASPEvaluationError",
    "is_hashable",
]


class _Evaluator:
    def __init__(self, toks: list[list[Any]] | np.ndarray, causal: bool) -> None:
        self.causal = causal
        self.token_vectors: np.ndarray | None = None
        if isinstance(toks, np.ndarray) and toks.ndim == 3:  # vector tokens [batch, n, width]
            self.batch, self.n = toks.shape[:2]
            self.token_vectors = toks.astype(np.float64)
            self.token_array = self.token_cat = None
            self.memo: dict[int, Any] = {}
            return
        if isinstance(toks, np.ndarray) and toks.dtype != object:
            self.batch, self.n = toks.shape
            if toks.dtype.kind in "fiub":
                self.token_array = toks.astype(np.float64)
                self.token_cat = None  # made on first categorical use
                self._token_source = toks  # its values are those of toks.tolist()
            else:
                table, codes = columns.factorize(toks.ravel().tolist())
                self.token_cat = Cat(codes.reshape(toks.shape), table)
        else:
            self.batch = len(toks)
            self.n = len(toks[0]) if self.batch else 0
            flat = [as_token(t) for row in toks for t in row]  # np.int64(3) is the token 3
            table, codes = columns.factorize(flat)
            self.token_cat = Cat(codes.reshape(self.batch, self.n), table)
        self.memo: dict[int, Any] = {}

    # -- dispatch ------------------------------------------------------------------------
    def eval(self, e: E.RASPExpr) -> Any:
        got = self.memo.get(e.uid)
        if got is not None:
            return got
        # the nodes not yet evaluated, children first (iterative: deep programs do not hit
        # the recursion limit; a cycle is refused)
        for node in E.dependency_order(e, self.memo):
            self.memo[node.uid] = self._eval_node(node)
        return self.memo[e.uid]

    def _eval_node(self, e: E.RASPExpr) -> Any:
        val = self._compute(e)
        if isinstance(e, E.SOp):
            if E.is_numerical(e):
                val = columns.to_float(val, f"S-op {e.label!r}")
            elif isinstance(val, np.ndarray):
                val = columns.cat_from_array(val)
        return val

    def _compute(self, e: E.RASPExpr) -> Any:
        m = self.memo
        b, n = self.batch, self.n
        if isinstance(e, E.TokenChannel):
            if self.token_vectors is None:
                raise RASPEvaluationError(
                    f"{e.label!r} reads channel {e.channel} of vector tokens, but the input is "
                    "a sequence of scalars; pass one vector per position"
                )
            if e.channel >= self.token_vectors.shape[2]:
                raise RASPEvaluationError(
                    f"{e.label!r} reads channel {e.channel}, but the tokens have width "
                    f"{self.token_vectors.shape[2]}"
                )
            return self.token_vectors[:, :, e.channel].copy()
        if isinstance(e, E.TokensType) and self.token_vectors is not None:
            raise RASPEvaluationError(
                "this program reads both `tokens` and token channels; with vector tokens read "
                "them by channel (rasp.token_channel(k))"
            )
        if isinstance(e, E.TokensType):
            if self.token_cat is None and E.is_numerical(e):
                return self.token_array
            if self.token_cat is None:  # the tokens' own values: 3.0 stays 3.0, True True
                self.token_cat = columns.cat_from_tokens(self._token_source)
            return self.token_cat
        if isinstance(e, E.IndicesType):
            return Cat(np.broadcast_to(np.arange(n), (b, n)).copy(), list(range(n)))
        if isinstance(e, E.LengthType):
            if self.causal:
                return Cat(np.broadcast_to(np.arange(n), (b, n)).copy(), list(range(1, n + 1)))
            return Cat(np.zeros((b, n), dtype=np.int64), [n])
        if isinstance(e, E.Full):
            return Cat(np.zeros((b, n), dtype=np.int64), [e.fill])
        if isinstance(e, E.ConstantSOp):
            vals = e.value
            if len(vals) != n:
                if e.check_length or len(vals) < n:
                    raise RASPEvaluationError(
                        f"ConstantSOp {e.label!r} has {len(vals)} values but the input has "
                        f"length {n}; give one value per position"
                    )
                vals = vals[:n]
            table, codes = columns.factorize(vals)
            return Cat(np.broadcast_to(codes, (b, n)).copy(), table)
        if isinstance(e, E.Map):
            return self._map(e, m[e.inner.uid])
        if isinstance(e, E.SequenceMap):
            return self._sequence_map(e, [m[s.uid] for s in e.sops])
        if isinstance(e, E.Select):
            return self._select(e, m[e.keys.uid], m[e.queries.uid])
        if isinstance(e, E.ConstantSelector):
            v = e.value
            if v.shape != (n, n):
                raise RASPEvaluationError(
                    f"ConstantSelector {e.label!r} is {v.shape[0]}x{v.shape[1]} but the input "
                    f"has length {n}"
                )
            return self._causal(v[None].copy())  # [1, n, n]: the same for every row
        if isinstance(e, E.SelectorAnd):
            return m[e.fst.uid] & m[e.snd.uid]
        if isinstance(e, E.SelectorOr):
            return m[e.fst.uid] | m[e.snd.uid]
        if isinstance(e, E.SelectorNot):
            return self._causal(~m[e.inner.uid])
        if isinstance(e, E.SelectMax):
            return self._select_max(e, m[e.base.uid], m[e.score.uid])
        if isinstance(e, E.Aggregate):
            return self._aggregate(e, m[e.selector.uid], m[e.sop.uid])
        if isinstance(e, E.SelectorWidth):
            width = np.broadcast_to(m[e.selector.uid].sum(axis=-1), (b, n))
            # only the widths some query has: a later map is called once per table value and
            # must not be called (and fail) on a width that no position holds
            uniq, codes = np.unique(width, return_inverse=True)
            return Cat(codes.reshape(width.shape).astype(np.int64), [int(u) for u in uniq])
        raise TypeError(f"the interpreter does not know {type(e).__name__} ({e.label!r})")

    def _causal(self, sel: np.ndarray) -> np.ndarray:
        if self.causal:
            if getattr(self, "_causal_mask", None) is None:  # made on first use: [n, n]
                self._causal_mask = np.tril(np.ones((self.n, self.n), dtype=bool))
            sel &= self._causal_mask
        return sel

    # -- maps ------------------------------------------------------------------------------
    def _map(self, e: E.Map, x: Any) -> Any:
        op = e._op
        if isinstance(x, np.ndarray):
            if op is not None and op.numpy_fn is not None:
                with np.errstate(all="ignore"):
                    out = op.numpy_fn(x)
                if out.dtype == bool and not E.is_numerical(e):
                    # a categorical test keeps True/False values
                    return columns.cat_from_bools(out)
                return np.asarray(out, dtype=np.float64) if out.dtype != object else out
            x = columns.cat_from_array(x)
        if op is not None and op.kind == "position_table" and E.is_numerical(e):
            # a numerical table of the position (gathers.position_table): one look-up
            # (the argument's table as integers, kept for the next table of the same
            # argument: a program may hold thousands of tables of `indices`)
            ints = getattr(self, "_int_table", None)
            if ints is None or ints[0] is not x.table:
                ints = self._int_table = (x.table, np.asarray(x.table, dtype=np.int64))
            vals = np.asarray(op.numpy_fn(ints[1]))
            if x.codes.shape[-1] == len(vals) and columns.same_rows(x.codes):
                if np.array_equal(x.codes[0], np.arange(len(vals))):  # `indices` itself
                    return np.broadcast_to(vals, x.codes.shape)  # read-only, not a copy
            return vals[x.codes]
        # None (no value) stays None without calling the function, as in tracr
        raw = [None if v is None else _call(e, e.f, v) for v in x.table]
        return columns.cat_from_table_values(x.codes, raw)

    def _sequence_map(self, e: E.SequenceMap, args: list[Any]) -> Any:
        op = e._op
        if all(isinstance(a, np.ndarray) for a in args) and op is not None and op.numpy_fn:
            with np.errstate(all="ignore"):
                out = np.asarray(op.numpy_fn(*args))
            if out.dtype == bool and not E.is_numerical(e):
                return columns.cat_from_bools(out)
            return out.astype(np.float64)
        cats = [columns.to_cat(a) for a in args]
        # joint code of the tuple of argument values, then f once per distinct tuple
        joint = np.zeros(cats[0].codes.shape, dtype=np.int64)
        for c in cats:
            joint = joint * max(len(c.table), 1) + c.codes
        uniq, inv = np.unique(joint, return_inverse=True)
        inv = inv.reshape(joint.shape)
        raw = []
        for u in uniq.tolist():
            vals = []
            for c in reversed(cats):
                size = max(len(c.table), 1)
                vals.append(c.table[u % size])
                u //= size
            vals.reverse()
            # None in any argument gives None without calling the function, as in tracr
            raw.append(None if any(v is None for v in vals) else _call(e, e.f, *vals))
        return columns.cat_from_table_values(inv.astype(np.int64), raw)

    # -- selectors -------------------------------------------------------------------------
    def _select(self, e: E.Select, keys: Any, queries: Any) -> np.ndarray:
        pred = e.predicate
        if pred is E.Comparison.TRUE or pred is E.Comparison.FALSE:
            sel = np.full((1, self.n, self.n), pred is E.Comparison.TRUE)
            return self._causal(sel)
        numeric = isinstance(keys, np.ndarray) and isinstance(queries, np.ndarray)
        if isinstance(pred, E.Comparison) and numeric:
            # one [1, n, n] pattern for all rows
            if columns.same_rows(keys) and columns.same_rows(queries):
                keys, queries = keys[:1], queries[:1]
            sel = pred.numpy_fn(keys[:, None, :], queries[:, :, None])
            return self._causal(np.asarray(sel, dtype=bool))
        kc, qc = columns.to_cat(keys), columns.to_cat(queries)
        kcodes, qcodes = kc.codes, qc.codes
        if columns.same_rows(kcodes) and columns.same_rows(qcodes):
            kcodes, qcodes = kcodes[:1], qcodes[:1]
        if isinstance(pred, E.Comparison):
            ranks = columns.order_ranks(kc.table, qc.table)
            if ranks is not None:
                # compare ranks in a common order: the same answers, no table lookup
                rk, rq = ranks
                sel = pred.numpy_fn(rk[kcodes][:, None, :], rq[qcodes][:, :, None])
                return self._causal(np.asarray(sel, dtype=bool))
        # predicate table [query value, key value], evaluated once per pair of values
        table = None
        if isinstance(pred, E.Comparison):
            table = columns.comparison_table(pred, kc.table, qc.table)
        if table is None:
            table = np.zeros((len(qc.table), len(kc.table)), dtype=bool)
            for qi, qv in enumerate(qc.table):
                for ki, kv in enumerate(kc.table):
                    table[qi, ki] = _call(e, _truth_of(pred), kv, qv)
        sel = table[qcodes[:, :, None], kcodes[:, None, :]]
        return self._causal(sel)

    def _select_max(self, e: E.SelectMax, base: np.ndarray, score: Any) -> np.ndarray:
        """The keys of ``base`` whose score is the largest among them (ties all kept)."""
        s = columns.to_float(score, f"the score of SelectMax {e.label!r}")  # [batch, key]
        full = np.broadcast_to(base, (self.batch, self.n, self.n))
        if np.isnan(s).any():
            rows, qs, ks = np.nonzero(full & np.isnan(s)[:, None, :])
            if len(rows):
                raise RASPEvaluationError(
                    f"SelectMax {e.label!r}: the score at key position {ks[0]} is NaN, which "
                    "has no order; give the score S-op real values"
                )
        cand = np.where(full, s[:, None, :], -np.inf)  # [batch, query, key]
        top = cand.max(axis=-1, keepdims=True) if self.n else cand
        return full & (s[:, None, :] == top)

    # -- aggregation -------------------------------------------------------------------------
    def _aggregate(self, e: E.Aggregate, sel: np.ndarray, vals: Any) -> Any:
        b, n = self.batch, self.n
        count = np.broadcast_to(sel.sum(axis=-1), (b, n))
        if E.is_numerical(e) or e.reduction == "sum":
            v = columns.to_float(vals, f"the values aggregated by {e.label!r}")
            with np.errstate(all="ignore"):  # inf and nan values propagate, as in numpy
                if not np.isfinite(v).all():
                    # only selected keys count: an inf at an unselected key must not turn
                    # into 0 * inf = nan for the queries that do not read it
                    full = np.broadcast_to(sel, (b, n, n))
                    total = np.where(full, v[:, None, :], 0.0).sum(axis=-1)
                elif sel.shape[0] == 1:  # one pattern for every row: a single matrix product
                    total = v @ sel[0].T.astype(np.float64)
                else:
                    total = np.matmul(sel, v[:, :, None])[:, :, 0]
            if e.reduction == "mean":
                with np.errstate(all="ignore"):
                    total = total / np.maximum(count, 1)
            default = (
                0.0 if e.default is None else columns.to_number(e.default, f"{e.label!r} default")
            )
            return np.where(count > 0, total, default)
        c = columns.to_cat(vals)
        # narrow codes: faster comparisons
        codes = c.codes.astype(columns.small_int(len(c.table)))
        # the first selected key's code, then: does any selected key hold another one?
        first = np.broadcast_to(np.argmax(sel, axis=-1), (b, n))
        lo = np.take_along_axis(codes, first, axis=1)
        bad = (sel & (codes[:, None, :] != lo[:, :, None])).any(axis=-1)
        if bad.any():
            bi, qi = np.argwhere(bad)[0]
            row = sel[bi if sel.shape[0] > 1 else 0, qi]
            seen = sorted({repr(c.table[k]) for k in c.codes[bi][row]})
            raise RASPEvaluationError(
                f"categorical Aggregate {e.label!r} would average several distinct values "
                f"({', '.join(seen)}) at query position {qi}; a categorical aggregate must "
                "select one value (make the selector select one key, or annotate the "
                "aggregate numerical to take the mean)"
            )
        table = list(c.table) + [e.default]
        out = np.where(count > 0, lo, len(c.table)).astype(np.int64)
        # keep only the values some query holds: a later map is called once per table value,
        # and must not be called on a default (None) or a key value that no query selected
        used = np.unique(out)
        if len(used) < len(table):
            remap = np.zeros(len(table), dtype=np.int64)
            remap[used] = np.arange(len(used))
            out, table = remap[out], [table[k] for k in used.tolist()]
        return columns.cat_from_table_values(out, table)


def _call(e: E.RASPExpr, f: Any, *args: Any) -> Any:
    try:
        return f(*args)
    except Exception as exc:  # a user's function failed: say where
        shown = ", ".join(repr(a) for a in args)
        raise RASPEvaluationError(
            f"the function of {e.label!r} raised {type(exc).__name__}: {exc} on ({shown})"
        ) from exc


def _truth_of(pred: Any) -> Any:
    """``pred`` returning a bool (a result with no single truth value raises TypeError)."""
    return lambda k, q: as_truth(pred(k, q))


def _is_batch(xs: Any) -> bool:
    if isinstance(xs, np.ndarray):
        return xs.ndim == 2
    return len(xs) > 0 and isinstance(xs[0], (list, tuple, np.ndarray))


def _check_inputs(
    rows: Sequence[Sequence[Any]], vocab: Iterable[Any] | None, max_seq_len: int | None
) -> None:
    if isinstance(rows, np.ndarray):
        rows = rows.tolist()  # numpy scalars (np.str_, np.int64) -> the Python values of a vocab
    n = len(rows[0]) if len(rows) else 0
    for r, row in enumerate(rows):
        if len(row) != n:
            raise ValueError(
                f"a batch needs sequences of equal length: row 0 has {n}, row {r} has "
                f"{len(row)}; evaluate them separately or pad them"
            )
    if max_seq_len is not None and n > max_seq_len:
        raise ValueError(
            f"input length {n} exceeds max_seq_len={max_seq_len}; shorten the input or "
            "raise max_seq_len"
        )
    if vocab is not None:
        if any(v is None for v in vocab):
            raise ValueError(
                "vocab contains None, which RASP reserves for 'no value' (what an empty "
                "categorical Aggregate gives), so a None token could not be told apart from "
                "it; use another token for it, such as '<none>'"
            )
        vocab = list(vocab)
        unhashable = [v for v in vocab if not is_hashable(v)]
        if unhashable:
            raise TypeError(
                f"vocab tokens must be hashable values (str, int, float, bool, tuple), got "
                f"{type(unhashable[0]).__name__} {unhashable[0]!r}; use a tuple for a "
                "compound token"
            )
        vocab = [as_token(v) for v in vocab]
        allowed = {value_key(v) for v in vocab}
        for r, row in enumerate(rows):
            for i, t in enumerate(row):
                if value_key(as_token(t)) not in allowed:
                    raise ValueError(
                        not_in_vocab_message(
                            as_token(t),
                            f"position {i} (row {r})",
                            sorted(vocab, key=repr),
                            "use only declared tokens",
                        )
                    )


def _vector_tokens(xs: Any, width: int, batch: bool) -> np.ndarray:
    """Vector-token input as a float64 array ``[batch, n, width']`` (width' >= ``width``):
    ``[n, width']`` is one sequence unless ``batch`` (evaluate_batch wants 3-D input)."""
    try:
        arr = np.asarray(xs, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"this program reads vector tokens (channels 0..{width - 1}); pass an array "
            f"[n, width] of real numbers (or [batch, n, width]): {exc}"
        ) from None
    if arr.ndim == 2 and not batch:
        arr = arr[None]
    if arr.ndim != 3 and not (arr.size == 0 and arr.ndim in (1, 2)):
        shape = "[batch, n, width]" if batch else "[n, width] or [batch, n, width]"
        raise ValueError(
            f"this program reads vector tokens (channels 0..{width - 1}); expected an array "
            f"{shape}, got shape {list(arr.shape)}"
        )
    if arr.ndim != 3:
        return np.zeros((arr.shape[0] if arr.ndim == 2 else 0, 0, width))
    if arr.shape[1] and arr.shape[2] < width:
        raise ValueError(
            f"this program reads token channel {width - 1}, but the tokens have width "
            f"{arr.shape[2]}"
        )
    if not np.isfinite(arr).all():
        raise ValueError("vector tokens must be finite real numbers (found inf or nan)")
    return arr


def _output(e: E.RASPExpr, val: Any) -> list:
    if isinstance(val, np.ndarray) and val.dtype == bool:
        return val.tolist()
    if isinstance(val, np.ndarray):
        return val.tolist()
    return val.to_objects().tolist()


def evaluate_batch(
    program: E.RASPExpr,
    xs: Sequence[Sequence[Any]] | np.ndarray,
    *,
    causal: bool = False,
    vocab: Iterable[Any] | None = None,
    max_seq_len: int | None = None,
) -> list[list[Any]]:
    """Evaluates ``program`` on a batch of equal-length sequences.

    Args:
        program: an S-op (or a selector: then each row is a query-by-key boolean matrix).
        xs: a list of token lists, or a 2-D numpy array.
        causal: each query sees only keys at positions <= its own.
        vocab: if given, every token must belong to it.
        max_seq_len: if given, sequences may not be longer.

    Returns:
        One list of output values per input sequence.

    Raises:
        TypeError: ``program`` is not a RASP expression.
        ValueError: bad input (unequal lengths, unknown token); RASPEvaluationError for a
            program that cannot run on this input.

    >>> from attnsim import rasp
    >>> evaluate_batch(rasp.indices + 1, [[0, 0], [5, 5]])
    [[1, 2], [1, 2]]
    """
    if not isinstance(program, E.RASPExpr):
        raise TypeError(
            f"evaluate expects a RASP expression, got {type(program).__name__}; build one "
            "with attnsim.rasp (tokens, Map, Select, Aggregate, ...)"
        )
    width = E.reads_channels(program)
    if width:
        arr = _vector_tokens(xs, width, batch=True)
        if max_seq_len is not None and arr.shape[1] > max_seq_len:
            raise ValueError(
                f"input length {arr.shape[1]} exceeds max_seq_len={max_seq_len}; shorten the "
                "input or raise max_seq_len"
            )
        if arr.shape[0] == 0:
            return []
        if arr.shape[1] == 0:
            return [[] for _ in range(arr.shape[0])]
        ev = _Evaluator(arr, causal)
        val = ev.eval(program)
        if isinstance(program, E.Selector):
            return np.broadcast_to(val, (ev.batch, ev.n, ev.n)).tolist()
        return _output(program, val)
    if not isinstance(xs, np.ndarray):
        if not isinstance(xs, Sequence) or any(
            not isinstance(r, (Sequence, np.ndarray)) for r in xs
        ):
            raise TypeError(
                "evaluate_batch expects a list of token sequences (lists or 1-D arrays) or a "
                f"2-D array, got {type(xs).__name__}; pass [sequence] for one sequence"
            )
        xs = [list(r) for r in xs]
    if vocab is not None or max_seq_len is not None or not isinstance(xs, np.ndarray):
        _check_inputs(xs, vocab, max_seq_len)
    if len(xs) == 0:
        return []
    if len(xs[0]) == 0:  # empty sequences: no position, so no value
        return [[] for _ in range(len(xs))]
    ev = _Evaluator(xs, causal)
    val = ev.eval(program)
    if isinstance(program, E.Selector):
        return np.broadcast_to(val, (ev.batch, ev.n, ev.n)).tolist()
    return _output(program, val)


def evaluate(
    program: E.RASPExpr,
    xs: Sequence[Any] | np.ndarray,
    *,
    causal: bool = False,
    vocab: Iterable[Any] | None = None,
    max_seq_len: int | None = None,
) -> list:
    """Evaluates ``program`` on one sequence, or on a batch (a list of lists or a 2-D array).

    Returns a list of values (one per position), or a list of such lists for a batch.
    See :func:`evaluate_batch` for the arguments.

    >>> from attnsim import rasp
    >>> rasp.evaluate(rasp.Map(lambda t: t.upper(), rasp.tokens), ["a", "b"])
    ['A', 'B']
    """
    width = E.reads_channels(program) if isinstance(program, E.RASPExpr) else 0
    if width:  # vector tokens: [n, width] is one sequence, [batch, n, width] a batch
        arr = _vector_tokens(xs, width, batch=False)
        out = evaluate_batch(program, arr, causal=causal, max_seq_len=max_seq_len)
        return out if np.ndim(xs) == 3 else (out[0] if out else [])
    if isinstance(xs, (str, bytes)):
        xs = list(xs)
    if not isinstance(xs, (Sequence, np.ndarray)):
        raise TypeError(
            f"evaluate expects a sequence of tokens (a list, a string or a 1-D array) or a "
            f"batch of them, got {type(xs).__name__} {xs!r}; wrap one token as [token]"
        )
    if _is_batch(xs):
        return evaluate_batch(program, xs, causal=causal, vocab=vocab, max_seq_len=max_seq_len)
    # one sequence is a batch of one; a 1-D array stays an array (its values come back as
    # Python values, not numpy scalars)
    row = xs[None, :] if isinstance(xs, np.ndarray) else [list(xs)]
    out = evaluate_batch(program, row, causal=causal, vocab=vocab, max_seq_len=max_seq_len)
    return out[0] if out else []
