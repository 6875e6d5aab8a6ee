"""Checkpoint files: reading ``model.json`` and ``model.safetensors`` and refusing damage.

A checkpoint is data only: a JSON file of metadata and a safetensors file of weights.
Reading one checks everything before building anything: the JSON's keys and the kind of each
value, that the directions it names exist, that the weights file holds exactly the tensors
the config asks for (names, shapes, dtypes, read from its header without loading them), that
the model fits in memory, and that every weight is finite. Whatever is wrong ends in a
:class:`DamagedCheckpointError` (a ValueError) naming the file and the key or tensor, never
in a KeyError, a TypeError or a model that runs and answers None.

The JSON records a digest (``"digest"``): a SHA-256 of every table of ``model.json`` (the
config, the residual directions, the vocabulary, the output decoding, the run-time checks, the
report, the plan, the storage layout) and of every tensor of ``model.safetensors``, made by
:func:`attnsim.model.digests.digest`, the hash :func:`attnsim.model.onnx_export.fingerprint` uses.
Loading recomputes them after the checks above and refuses, naming the table or the tensor,
a checkpoint whose weights or tables are not the ones saved together (weights copied from
another model of the same shape, a vocabulary or output table edited by hand). A checkpoint
without a digest (written before checkpoints carried one) is refused too: load it with
``CompiledModel.load(path, check=False)`` if its files are trusted, and save it again.

>>> import tempfile
>>> from attnsim import library
>>> from attnsim.compiler import compile_program
>>> from attnsim.model.compiled import CompiledModel
>>> d = tempfile.mkdtemp()
>>> _ = compile_program(library.make_hist(), vocab="ab", max_seq_len=3).save(d)
>>> CompiledModel.load(d).run("aba")
[2, 1, 2]
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from attnsim.model import digests, memory
from attnsim.model.config import ModelConfig
from attnsim.model.pattern_store import PREFIX as PATTERNS
from attnsim.values import is_int, is_real, value_key

FORMAT = "attnsim-compiled-model/1"
META_KEYS = (
    "format",
    "config",
    "residual",
    "vocab",
    "numerical_tokens",
    "max_seq_len",
    "fixed_length",
    "output",
    "guards",
    "report",
)
META_OPTIONAL = ("plan", "storage", "digest", "head_patterns")  # see model.pattern_store
OUTPUT_KEYS = ("kind", "values", "dims", "form")
GUARD_KEYS = ("label", "form", "stage", "allowed", "integer")
GUARD_OPTIONAL = ("value_range", "cancellation", "relative", "dims", "names", "one_hot")
GUARD_OPTIONAL += ("none_ok", "sizes", "forbidden", "reason")


class DamagedCheckpointError(ValueError):
    """A checkpoint's files are not what :meth:`CompiledModel.save` writes."""


def damaged(file: Path, what: str) -> DamagedCheckpointError:
    return DamagedCheckpointError(
        f"damaged checkpoint: {file} {what}; save the model again (or compile it anew)"
    )


def check_digest(
    path: Path, meta: Mapping[str, Any], tensors: Mapping[str, torch.Tensor], check: bool
) -> None:
    """Refuses a checkpoint whose tables or tensors are not the ones its digest records.

    Args:
        path: the checkpoint's directory (for messages).
        meta: what :func:`read_meta` returned (it carries the recorded and found table digests).
        tensors: the tensors read from ``model.safetensors``.
        check: False accepts a checkpoint without a digest, or whose digest does not match.

    Raises:
        DamagedCheckpointError: with ``check``, no digest, or a table or tensor that differs
            from the one saved (named, with what to do).
    """
    if not check:
        return
    meta_file = path / "model.json"
    recorded, tables = meta[digests.DIGEST_KEY]
    if recorded is None:
        raise DamagedCheckpointError(
            f"unchecked checkpoint: {meta_file} records no digest of its weights and tables "
            "(it was saved before checkpoints carried one, or the digest was removed), so "
            "nothing shows that model.safetensors and its tables belong together; if you "
            "trust these files, load them with CompiledModel.load(path, check=False) and save "
            "the model again to record one"
        )
    advice = (
        "the files were changed or mixed after saving: save the model again from its "
        "source (or compile it anew); CompiledModel.load(path, check=False) skips this check"
    )
    changed = sorted(set(tables) ^ set(recorded["tables"])) + sorted(
        k for k in tables if k in recorded["tables"] and tables[k] != recorded["tables"][k]
    )
    if changed:
        names = ", ".join(f"{digests.TABLE_NAMES.get(k, 'the table')} ({k!r})" for k in changed)
        raise DamagedCheckpointError(
            f"damaged checkpoint: in {meta_file}, {names}: not as saved (the file's digest "
            f"records other contents); {advice}"
        )
    found = digests.tensor_digests(tensors)
    changed = sorted(set(found) ^ set(recorded["tensors"])) + sorted(
        k for k in found if k in recorded["tensors"] and found[k] != recorded["tensors"][k]
    )
    if changed:
        shown = ", ".join(repr(k) for k in changed[:4]) + (
            f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        )
        raise DamagedCheckpointError(
            f"damaged checkpoint: in {path / 'model.safetensors'}, the "
            f"{'tensor' if len(changed) == 1 else 'tensors'} {shown}: not "
            f"as saved with {meta_file} (its digest records other contents: weights of another "
            f"model, or edited); {advice}"
        )


def read_meta(path: Path) -> tuple[dict, ModelConfig]:
    """The validated metadata of the checkpoint in ``path`` and its model config.

    Raises:
        FileNotFoundError: no ``model.json`` in ``path``.
        DamagedCheckpointError: the file is unreadable, not JSON, or not what ``save`` wrote.
    """
    if path.is_file():  # e.g. .../model.json itself: the checkpoint is its folder
        raise FileNotFoundError(
            f"{path} is a file; a checkpoint is the folder CompiledModel.save wrote (with "
            f"model.json and its weights): load the folder {path.parent}"
        )
    meta_file = path / "model.json"
    if not meta_file.exists():
        raise FileNotFoundError(f"no model.json in {path}; expected a saved CompiledModel")
    if not meta_file.is_file():
        raise damaged(meta_file, "is not a file (a directory?)")
    try:
        text = meta_file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise damaged(meta_file, f"cannot be read ({exc})") from None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise damaged(meta_file, f"is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DamagedCheckpointError(
            f"{meta_file} is not an attnsim compiled model (format {FORMAT}); load a directory "
            "written by CompiledModel.save"
        )
    check = _Checker(meta_file)
    check.keys(meta, META_KEYS, META_OPTIONAL, "the file")
    recorded = meta.get(digests.DIGEST_KEY)
    if recorded is not None:
        _digest_entry(check, recorded)
    try:
        cfg = ModelConfig.from_json(meta["config"])
    except (TypeError, ValueError) as exc:
        raise damaged(meta_file, f"has an invalid 'config' ({exc})") from None
    if "storage" in meta:  # sparse storage: the weights file is checked by read_sparse
        _storage(check, meta["storage"], cfg)
    else:
        _check_size(path, cfg)
    residual = check.str_list(meta["residual"], "'residual'")
    if len(residual) != cfg.d_model or len(set(residual)) != len(residual):
        raise damaged(
            meta_file,
            f"lists {len(residual)} residual directions ({len(set(residual))} distinct) for "
            f"d_model={cfg.d_model}",
        )
    dirs = set(residual)
    vocab = meta["vocab"]
    if vocab is not None:
        vocab = check.values(vocab, "'vocab'")
        if any(v is None for v in vocab) or len(set(map(value_key, vocab))) != len(vocab):
            raise damaged(meta_file, "has a 'vocab' with None or repeated tokens")
    if cfg.d_vocab != 1 + max(len(vocab or ()), 1):
        raise damaged(
            meta_file, f"has {len(vocab or ())} tokens for d_vocab={cfg.d_vocab} (BOS + tokens)"
        )
    for key in ("numerical_tokens", "fixed_length"):
        check.bool(meta[key], repr(key))
    if meta["numerical_tokens"] != cfg.numerical_tokens:
        raise damaged(meta_file, "disagrees with its config on 'numerical_tokens'")
    if not is_int(meta["max_seq_len"]) or meta["max_seq_len"] != cfg.n_ctx - 1:
        raise damaged(
            meta_file,
            f"has max_seq_len={meta['max_seq_len']!r} for n_ctx={cfg.n_ctx} (max_seq_len + 1)",
        )
    out = meta["output"]
    check.keys(out, OUTPUT_KEYS, (), "'output'")
    if out["kind"] not in ("cat", "num"):
        raise damaged(meta_file, f"has output kind {out['kind']!r}, expected 'cat' or 'num'")
    values = check.values(out["values"], "'output.values'")
    dims = check.dirs(out["dims"], dirs, "'output.dims'")
    if len(values) != len(dims):
        raise damaged(meta_file, f"has {len(values)} output values for {len(dims)} directions")
    form = check.form(out["form"], dirs, "'output.form'")
    guards = []
    if not isinstance(meta["guards"], list):
        raise damaged(meta_file, "has a 'guards' that is not a list")
    for i, g in enumerate(meta["guards"]):
        what = f"'guards[{i}]'"
        check.keys(g, GUARD_KEYS, GUARD_OPTIONAL, what)
        guards.append(_guard(check, g, dirs, cfg, what))
    report = meta["report"]
    if report is not None and not isinstance(report, dict):
        raise damaged(meta_file, "has a 'report' that is not an object")
    if report is not None and report.get("components") is not None:
        _components(check, report["components"], dirs)
    if "plan" in meta:
        _plan_summary(check, meta["plan"], cfg)
    clean = dict(meta)
    clean.update(
        vocab=vocab,
        output={"kind": out["kind"], "values": values, "dims": dims, "form": form},
        guards=guards,
    )
    clean[digests.DIGEST_KEY] = (recorded, digests.table_digests(meta))  # for check_digest
    return clean, cfg


def _digest_entry(check: _Checker, entry: Any) -> None:
    """The recorded digest: per table and per tensor, 64 hex digits."""
    check.keys(entry, ("tables", "tensors"), (), "'digest'")
    for key in ("tables", "tensors"):
        table = entry[key]
        if not isinstance(table, dict) or not all(
            isinstance(v, str) and len(v) == 64 and set(v) <= set("0123456789abcdef")
            for v in table.values()
        ):
            raise damaged(check.file, f"has a 'digest.{key}' that is not names -> SHA-256 hex")


PLAN_KEYS = ("static_heads", "partial_heads")


def _plan_summary(check: _Checker, plan: Any, cfg: ModelConfig) -> None:
    """The saved execution plan summary: per layer, lists of head indices."""
    check.keys(plan, PLAN_KEYS, (), "'plan'")
    for key in PLAN_KEYS:
        layers = check.list(plan[key], f"'plan.{key}'")
        if len(layers) != cfg.n_layers or not all(
            isinstance(hs, list) and all(is_int(h) and 0 <= h < cfg.n_heads for h in hs)
            for hs in layers
        ):
            raise damaged(
                check.file,
                f"has a 'plan.{key}' that is not {cfg.n_layers} lists of head indices "
                f"below {cfg.n_heads}",
            )


COMPONENT_KEYS = ("site", "layer", "kind", "start", "stop", "labels")
COMPONENT_OPTIONAL = ("ops", "reads", "writes", "hook")


def _components(check: _Checker, rows: Any, dirs: set) -> None:
    """The report's component table (optional: checkpoints before it have none)."""
    check.list(rows, "'report.components'")
    for i, row in enumerate(rows):
        what = f"'report.components[{i}]'"
        check.keys(row, COMPONENT_KEYS, COMPONENT_OPTIONAL, what)
        if row["site"] not in ("embed", "attn", "mlp", "output"):
            raise damaged(check.file, f"has {what} with an unknown site {row['site']!r}")
        for key in ("layer", "start", "stop"):
            if not is_int(row[key]):
                raise damaged(check.file, f"has {what} with a {key!r} that is not an int")
        check.str_list(row["labels"], f"{what}.labels")
        check.str_list(row.get("ops", []), f"{what}.ops")
        check.dirs(row.get("writes", []), dirs, f"{what}.writes")
        for pair in check.list(row.get("reads", []), f"{what}.reads"):
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                raise damaged(check.file, f"has {what}.reads that are not [side, directions]")
            check.dirs(pair[1], dirs, f"{what}.reads")


def _check_size(path: Path, cfg: ModelConfig) -> None:
    """Refuses a config whose weights cannot be in the weights file, or in memory.

    Runs before anything is allocated: the estimate comes from the config alone.
    """
    need = memory.weight_bytes(cfg)
    weights = path / "model.safetensors"
    what = (
        f"the config in {path / 'model.json'} (n_layers={cfg.n_layers}, d_model={cfg.d_model}, "
        f"d_mlp={cfg.d_mlp}, n_ctx={cfg.n_ctx}) asks for about {memory.gib(need)} of weights"
    )
    if weights.is_file() and weights.stat().st_size < need:
        raise DamagedCheckpointError(
            f"damaged checkpoint: {what}, but {weights} holds only "
            f"{weights.stat().st_size} bytes; save the model again (or compile it anew)"
        )
    memory.check_fits(need, f"loading: {what}, which", "load it on a larger machine")


def _cancellation(check: _Checker, g: dict, what: str) -> float | None:
    """A guard's ``cancellation`` (GuardSpec): None (not where it is ``relative``), or > 0."""
    c, rel = g.get("cancellation"), g.get("relative") is True
    if not (c is None and not rel or is_real(c) and 0 < c < math.inf):
        raise damaged(check.file, f"has {what}.cancellation = {c!r}, expected a number above 0")
    return c


def _guard(check: _Checker, g: dict, dirs: set, cfg: ModelConfig, what: str) -> dict:
    stage = g["stage"]
    if not is_int(stage) or not 0 <= stage <= 2 * cfg.n_layers:
        raise damaged(check.file, f"has {what} at stage {stage!r}, outside 0..{2 * cfg.n_layers}")
    allowed = g["allowed"]
    if allowed is not None:
        allowed = tuple(check.number(a, f"{what}.allowed") for a in check.list(allowed, what))
    value_range = g.get("value_range")
    if value_range is not None:
        pair = check.list(value_range, f"{what}.value_range")
        if len(pair) != 2:
            raise damaged(check.file, f"has a {what}.value_range that is not [lo, hi]")
        value_range = tuple(float(check.number(x, f"{what}.value_range", inf=True)) for x in pair)
    dims = tuple(check.dirs(g.get("dims", []), dirs, f"{what}.dims"))
    names = tuple(check.str_list(g.get("names", []), f"{what}.names"))
    if len(names) != len(dims):
        raise damaged(check.file, f"has {len(names)} names for {len(dims)} directions in {what}")
    sizes = tuple(check.list(g.get("sizes", []), f"{what}.sizes"))
    if sizes and (not all(is_int(n) and n >= 0 for n in sizes) or sum(sizes) != len(dims)):
        raise damaged(check.file, f"has {what}.sizes that do not split its directions")
    limits = sizes or (len(dims),)
    forbidden = []
    for item in check.list(g.get("forbidden", []), f"{what}.forbidden"):
        pair = check.list(item, f"{what}.forbidden")
        if len(pair) != 2 or not isinstance(pair[1], str):
            raise damaged(check.file, f"has a {what}.forbidden entry that is not [values, message]")
        combo = check.list(pair[0], f"{what}.forbidden")
        if len(combo) != len(limits) or not all(
            is_int(k) and -1 <= k < n for k, n in zip(combo, limits)
        ):
            raise damaged(check.file, f"has a {what}.forbidden entry outside its directions")
        forbidden.append((tuple(combo), pair[1]))
    for key in ("integer", "one_hot", "none_ok", "relative"):
        check.bool(g.get(key, key == "none_ok"), f"{what}.{key}")
    for key in ("label", "reason"):
        if not isinstance(g.get(key, ""), str):
            raise damaged(check.file, f"has a {what}.{key} that is not a string")
    return {
        "label": g["label"],
        "form": check.form(g["form"], dirs, f"{what}.form"),
        "stage": stage,
        "allowed": allowed,
        "integer": g["integer"],
        "value_range": value_range,
        "cancellation": _cancellation(check, g, what),
        "dims": dims,
        "names": names,
        **{key: g.get(key, key == "none_ok") for key in ("relative", "one_hot", "none_ok")},
        "sizes": sizes,
        "forbidden": tuple(forbidden),
        "reason": g.get("reason", ""),
    }


def _storage(check: _Checker, storage: Any, cfg: ModelConfig) -> None:
    """The ``storage`` entry of a sparse checkpoint: per layer, its heads and its units."""
    check.keys(storage, ("storage", "layers"), (), "'storage'")
    layers = check.list(storage["layers"], "'storage.layers'")
    if storage["storage"] != "sparse" or len(layers) != cfg.n_layers:
        raise damaged(check.file, f"has a 'storage' that is not {cfg.n_layers} sparse layers")
    for i, layer in enumerate(layers):
        what = f"'storage.layers[{i}]'"
        check.keys(layer, ("n_heads", "units"), (), what)
        units = check.list(layer["units"], f"{what}.units")
        if not is_int(layer["n_heads"]) or not 0 <= layer["n_heads"] <= cfg.n_heads:
            raise damaged(check.file, f"has {what} with n_heads outside 0..{cfg.n_heads}")
        for u in units:
            if not (
                isinstance(u, list)
                and len(u) == 2
                and u[0] in ("relu", "bilinear", *cfg.d_native)
                and is_int(u[1])
                and u[1] >= 0
            ):
                raise damaged(check.file, f"has {what} with a unit entry {u!r}")


def read_sparse(path: Path, cfg: ModelConfig, storage: dict) -> dict[str, torch.Tensor]:
    """The tensors of a sparse checkpoint, checked against its config and layer list:
    exactly the names the layers ask for, int64 coordinates within d_model (heads, units,
    token rows and channels within their counts), float64 finite weights.

    Raises:
        FileNotFoundError: no ``model.safetensors`` in ``path``.
        DamagedCheckpointError: anything else that is not what ``save`` wrote.
    """
    weights = path / "model.safetensors"
    if not weights.exists():
        raise FileNotFoundError(f"no model.safetensors in {path}; save the model again")
    if not weights.is_file():
        raise damaged(weights, "is not a file (a directory?)")
    # name -> (columns of the coordinate tensor, the bound of each column)
    d = cfg.d_model
    spec: dict[str, tuple[int, ...]] = {
        "embed.E": (cfg.d_vocab, d),
        "embed.num": (d,),
        "embed.vec": (max(cfg.token_width, 1), d),
        "embed.pos_dirs": (d,),
        "embed.pos_at": (cfg.n_ctx, 1 << 62),  # (position, column), columns checked below
    }
    for li, layer in enumerate(storage["layers"]):
        h = layer["n_heads"]
        spec[f"blocks.{li}.attn.qk"] = (h, d, d)
        spec[f"blocks.{li}.attn.ov"] = (h, d, d)
        for kind, n in layer["units"]:
            for part in ("inputs", "second", "outputs"):
                spec[f"blocks.{li}.mlp.{kind}.{part}"] = (n, d)
    names = set(spec) | {f"{k}_w" for k in spec if k != "embed.pos_dirs"} | {"embed.pos_default"}
    try:
        state = load_file(str(weights))
    except Exception as exc:
        raise damaged(weights, f"cannot be read ({exc})") from None
    for name in sorted(names ^ {k for k in state if not k.startswith(PATTERNS)}):
        which = "lacks" if name not in state else "holds the unexpected tensor"
        raise damaged(weights, f"{which} {name!r}")
    for name, bounds in spec.items():
        t = state[name]
        shape_ok = t.dim() == 1 if len(bounds) == 1 else t.dim() == 2 and t.shape[1] == len(bounds)
        if t.dtype != torch.int64 or not shape_ok:
            raise damaged(weights, f"holds {name!r} that is not int64 coordinates")
        cols = t.reshape(-1, len(bounds))
        for j, bound in enumerate(bounds):
            if len(cols) and (int(cols[:, j].min()) < 0 or int(cols[:, j].max()) >= bound):
                raise damaged(weights, f"holds {name!r} with a coordinate outside 0..{bound - 1}")
        if name + "_w" in state and state[name + "_w"].shape != (len(cols),):
            raise damaged(weights, f"holds {name + '_w'!r} of the wrong length")
    n_pos = len(state["embed.pos_dirs"])
    at = state["embed.pos_at"]
    if state["embed.pos_default"].shape != (n_pos,) or (len(at) and int(at[:, 1].max()) >= n_pos):
        raise damaged(weights, "holds position columns that do not match 'embed.pos_dirs'")
    for name in names - set(spec):
        t = state[name]
        if t.dtype != torch.float64:
            raise damaged(weights, f"holds {name!r} as {t.dtype}, but weights are float64")
        if not bool(torch.isfinite(t).all()):
            raise damaged(weights, f"holds NaN or an infinity in {name!r}")
    return state


def read_weights(path: Path, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The weights in ``path``, checked against ``cfg`` before any is loaded.

    Raises:
        FileNotFoundError: no ``model.safetensors`` in ``path``.
        DamagedCheckpointError: unreadable, a tensor missing, extra, of the wrong shape or
            dtype, or holding NaN or an infinity.
        ModelTooLargeError: the config asks for more memory than this machine has.
    """
    weights = path / "model.safetensors"
    if not weights.exists():
        raise FileNotFoundError(f"no model.safetensors in {path}; save the model again")
    if not weights.is_file():
        raise damaged(weights, "is not a file (a directory?)")
    expected = memory.weight_shapes(cfg)
    need = memory.weight_bytes(cfg, expected)
    sizes = (
        f"(the config asks for {cfg.n_layers} layers, d_model={cfg.d_model}, d_mlp={cfg.d_mlp}, "
        f"n_ctx={cfg.n_ctx}: about {memory.gib(need)} of weights)"
    )
    try:
        with safe_open(str(weights), framework="pt") as f:
            header = {
                k: (tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in f.keys()
            }
    except Exception as exc:  # safetensors raises its own error types for damaged files
        raise damaged(weights, f"cannot be read ({exc})") from None
    for name in expected:
        if name not in header:
            raise damaged(weights, f"lacks the tensor {name!r} {sizes}")
    for name in header:
        if name not in expected and not name.startswith(PATTERNS):  # see model.pattern_store
            raise damaged(weights, f"holds the tensor {name!r}, which the config has no place for")
    for name, (shape, dtype) in expected.items():
        got_shape, got_dtype = header[name]
        if got_shape != shape:
            raise damaged(
                weights,
                f"holds the tensor {name!r} with shape {list(got_shape)}, but the config "
                f"needs {list(shape)} {sizes}",
            )
        if got_dtype != _SAFETENSORS_DTYPE[dtype]:
            raise damaged(
                weights, f"holds the tensor {name!r} as {got_dtype}, but the config needs {dtype}"
            )
    memory.check_fits(need, f"loading this checkpoint {sizes}", "load it on a larger machine")
    try:
        state = load_file(str(weights))
    except Exception as exc:
        raise damaged(weights, f"cannot be read ({exc})") from None
    for name, tensor in state.items():
        bad = ~torch.isfinite(tensor) if not name.startswith(PATTERNS) else torch.zeros(0)
        if bool(bad.any()):
            where = [int(i) for i in torch.nonzero(bad)[0]]
            raise damaged(
                weights,
                f"holds {float(tensor[tuple(where)])} in the tensor {name!r} at {where}; "
                "weights must be finite",
            )
    return state


_SAFETENSORS_DTYPE = {torch.float64: "F64", torch.float32: "F32"}


class _Checker:
    """Checks the kind of each JSON value, raising DamagedCheckpointError with its place."""

    def __init__(self, file: Path) -> None:
        self.file = file

    def keys(self, obj: Any, required: tuple, optional: tuple, what: str) -> None:
        if not isinstance(obj, dict):
            raise damaged(self.file, f"has {what} that is not a JSON object")
        for k in required:
            if k not in obj:
                raise damaged(self.file, f"lacks the key {k!r} in {what}")
        for k in obj:
            if k not in required and k not in optional:
                raise damaged(self.file, f"has an unexpected key {k!r} in {what}")

    def list(self, obj: Any, what: str) -> list:
        if not isinstance(obj, list):
            raise damaged(self.file, f"has {what} that is not a list ({type(obj).__name__})")
        return obj

    def bool(self, obj: Any, what: str) -> bool:
        if not isinstance(obj, bool):
            raise damaged(self.file, f"has {what} = {obj!r}, expected true or false")
        return obj

    def str_list(self, obj: Any, what: str) -> list[str]:
        items = self.list(obj, what)
        if not all(isinstance(x, str) for x in items):
            raise damaged(self.file, f"has {what} with an entry that is not a string")
        return items

    def dirs(self, obj: Any, dirs: set, what: str) -> list[str]:
        items = self.str_list(obj, what)
        for d in items:
            if d not in dirs:
                raise damaged(self.file, f"names the direction {d!r} in {what}, not in 'residual'")
        return items

    def number(self, obj: Any, what: str, inf: bool = False) -> float:
        ok = is_real(obj) and (math.isfinite(obj) or (inf and not math.isnan(obj)))
        if not ok:
            raise damaged(self.file, f"has {what} = {obj!r}, expected a finite number")
        return obj

    def form(self, obj: Any, dirs: set, what: str) -> tuple[tuple[str, float], ...]:
        out = []
        for pair in self.list(obj, what):
            if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], str):
                raise damaged(
                    self.file, f"has {what} with an entry that is not [direction, weight]"
                )
            if pair[0] not in dirs:
                raise damaged(
                    self.file, f"names the direction {pair[0]!r} in {what}, not in 'residual'"
                )
            out.append((pair[0], float(self.number(pair[1], what))))
        return tuple(out)

    def values(self, obj: Any, what: str) -> list:
        """Token or output values: JSON lists stand for tuples (a list is never a token)."""
        items = [_tuples(v) for v in self.list(obj, what)]
        for v in items:
            if not _plain_value(v):
                raise damaged(self.file, f"has {what} with the value {v!r}, not a token")
        return items


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _plain_value(v: Any) -> bool:
    if isinstance(v, tuple):
        return all(_plain_value(x) for x in v)
    if isinstance(v, float):
        return math.isfinite(v)
    return v is None or isinstance(v, (str, int, bool))
