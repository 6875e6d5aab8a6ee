"""What interpretability research reads from a compiled model: each component's output,
activation patching of components, and the ground-truth circuit with path patching of its
edges. :class:`~attnsim.model.compiled.CompiledModel` has these methods from
:class:`GroundTruth`; they need its dense weights, its encoding and its component table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from attnsim.model import circuit, codec, path_patching
from attnsim.model.native import NATIVE_FUNCTIONS
from attnsim.model.report import Component
from attnsim.model.stream import expand_update

__all__ = ["GroundTruth"]

_as_batch = codec.as_batch


class GroundTruth:
    """Components, patching and circuits of a compiled model (a base of ``CompiledModel``)."""

    def component_output(self, xs: Sequence[Any], component: Component) -> torch.Tensor:
        """What ``component`` adds to the residual stream on ``xs``: ``[batch, pos, d_model]``.

        Heads and unit ranges only (the embedding and the readout add nothing of their own).
        """
        self.dense_only("component_output")
        batch, _ = _as_batch(xs, self._is_token)
        ids, vals = self.encode(batch)
        cache: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            self.model(ids, vals, cache=cache)
            key = "hook_resid_pre" if component.site == "attn" else "hook_resid_mid"
            x = cache[f"blocks.{component.layer}.{key}"]
            return self._contribution(x, component)

    def run_patched(
        self,
        xs: Sequence[Any],
        source: Sequence[Any],
        components: Iterable[Component],
    ) -> list:
        """Runs ``xs`` with the outputs of ``components`` taken from a run on ``source``.

        Activation patching: each patched head or unit range adds to the residual stream what
        it added in the (unpatched) run on ``source``, instead of what it computes on ``xs``;
        everything else runs on ``xs``. Run-time checks are off (a patched run may hold
        values no input gives).

        Args:
            xs: the input (one sequence or a batch).
            source: an input of the same shape whose activations are patched in.
            components: rows of :meth:`components` (heads or MLP unit ranges), or their
                names (``"L1H0"``, ``"L0 MLP relu 3-7"``).

        Returns:
            The decoded output, like :meth:`run`; a categorical position that decodes to no
            single value (a mixture the patch made) is :data:`attnsim.model.path_patching.MIXED`,
            as in :meth:`run_path_patched`.

        Raises:
            TypeError: ``components`` is not a collection of rows or names.
            ValueError: a name this model has no row for, a row of another model, or the
                embedding or the readout (only heads and MLP units can be patched).
        """
        self.dense_only("run_patched")
        batch, single = _as_batch(xs, self._is_token)
        src, _ = _as_batch(source, self._is_token)
        if len(src) != len(batch) or any(len(a) != len(b) for a, b in zip(src, batch)):
            raise ValueError("run_patched needs a source input of the same shape as xs")
        components = self._patchable(components)
        src_out = {c: self.component_output(src, c) for c in components}
        handles = []
        for c in components:
            block = self.model.blocks[c.layer]
            module = block.attn if c.site == "attn" else block.mlp

            def hook(mod, args, out, c=c):
                out = expand_update(out, args[0])  # a planned sublayer's (cols, values)
                return out - self._contribution(args[0], c) + src_out[c]

            handles.append(module.register_forward_hook(hook))
        try:
            ids, vals = self.encode(batch)
            resid = self.forward(ids, vals)
        finally:
            for h in handles:
                h.remove()
        out = path_patching.decode_patched(self, resid)
        return out[0] if single else out

    def _patchable(self, components: Any) -> list[Component]:
        """``run_patched``'s components as rows of this model's table (names looked up)."""
        if isinstance(components, (str, Component)) or not isinstance(components, Iterable):
            raise TypeError(
                "run_patched takes a list of components (rows of model.components() or "
                f"their names, such as ['L0H0']), got {type(components).__name__} "
                f"{components!r}; wrap a single one in a list"
            )
        components = list(components)
        has_table = self._report is not None and self._report.components is not None
        named = any(isinstance(c, str) for c in components)
        table = self.components() if has_table or named else ()
        rows = {c.name: c for c in table if c.site in ("attn", "mlp")}
        out = []
        for c in components:
            if isinstance(c, str):
                if c not in rows:
                    names = ", ".join(list(rows)[:12]) + (", ..." if len(rows) > 12 else "")
                    raise ValueError(
                        f"this model has no head or MLP unit range named {c!r}; it has "
                        f"{names or 'none'} (see model.components())"
                    )
                c = rows[c]
            elif not isinstance(c, Component):
                raise TypeError(
                    f"run_patched components must be rows of model.components() or their "
                    f"names, got {type(c).__name__} {c!r}"
                )
            elif c.site not in ("attn", "mlp"):
                raise ValueError(f"only heads and MLP units can be patched, got {c.name}")
            elif (table and c not in table) or not 0 <= c.layer < len(self.model.blocks):
                raise ValueError(
                    f"{c.name} is not a row of this model's components() (a row of another "
                    "model?); take the rows from this model's components()"
                )
            out.append(c)
        return out

    def circuit(self, granularity: str = "component") -> circuit.Circuit:
        """The ground-truth circuit (see :mod:`attnsim.model.circuit`): nodes are the
        embeddings, the active heads (at "qkv" also their query, key and value inputs), the
        MLP groups and the readout; an edge A -> B wherever B reads a direction A writes.

        Args:
            granularity: "component" or "qkv".

        Returns:
            The :class:`~attnsim.model.circuit.Circuit`.

        Raises:
            ValueError: an unknown granularity, or the model carries no component table.

        >>> from attnsim import compile_program, library
        >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
        >>> [e.pair for e in m.circuit("qkv").edges if e.receiver.startswith("L0H0.")]
        [('embed', 'L0H0.q'), ('embed', 'L0H0.k'), ('embed', 'L0H0.v')]
        """
        return circuit.build(self.components(), self.config.n_layers, granularity)

    def run_path_patched(
        self,
        xs: Sequence[Any],
        source: Sequence[Any] | None,
        edges: Iterable[tuple[str, str] | circuit.Edge],
        granularity: str = "component",
    ) -> list:
        """Runs ``xs`` with ``edges`` ablated (:func:`path_patching.run_ablated`; no checks).

        Args:
            xs: the input (one sequence or a batch of equal length).
            source: an input of the same shape, or None (zero ablation).
            edges: ``(sender, receiver)`` node names of :meth:`circuit` (any pair), or Edges.
            granularity: of the node names.

        Raises:
            ValueError: a pair the forward pass does not allow, or a source of another shape.

        >>> from attnsim import compile_program, library
        >>> m = compile_program(library.make_hist(), vocab="abc", max_seq_len=4)
        >>> m.run_path_patched("aab", "abc", [("L0H0", "L0 MLP relu 0-8")])
        [1, 1, 1]
        """
        self.dense_only("run_path_patched")
        batch, single = _as_batch(xs, self._is_token)
        src = None if source is None else _as_batch(source, self._is_token)[0]
        pairs = [e.pair if isinstance(e, circuit.Edge) else tuple(e) for e in edges]
        out = path_patching.run_ablated(self, self.circuit(granularity), batch, src, pairs)
        return out[0] if single else out

    def check_circuit(
        self, pairs: Sequence[tuple[Sequence[Any], Sequence[Any]]], granularity: str = "component"
    ) -> path_patching.CircuitCheck:
        """Checks :meth:`circuit` faithful and minimal (:func:`path_patching.check`).

        Args:
            pairs: ``(clean, corrupted)`` inputs, of equal length each.
            granularity: "component" or "qkv".

        Returns:
            A :class:`~attnsim.model.path_patching.CircuitCheck`.

        >>> from attnsim import compile_program, library
        >>> m = compile_program(library.make_hist(), vocab="abc", max_seq_len=4)
        >>> got = m.check_circuit(path_patching.resample_pairs(["aab", "abc", "cca"]))
        >>> got.faithful, got.necessary[-1], len(got.redundant)
        (True, ('L0 MLP relu 0-8', 'output'), 1)
        """
        self.dense_only("check_circuit")
        return path_patching.check(self, self.circuit(granularity), pairs)

    def _contribution(self, x: torch.Tensor, c: Component) -> torch.Tensor:
        """The residual update of head/unit range ``c`` on the stream ``x`` entering it."""
        block = self.model.blocks[c.layer]
        if c.site == "attn":
            attn = block.attn
            d_head = attn.W_Q.shape[-1]
            hs = torch.arange(c.start, c.stop)
            _, _, z = attn._heads(x, hs, d_head, d_head, False)  # [batch, head, pos, d_head]
            return torch.einsum("bhqk,hkd->bqd", z, attn.W_O[hs])
        mlp = block.mlp
        sl = slice(c.start, c.stop)
        if c.kind == "relu":
            return torch.relu(x @ mlp.W_in[:, sl]) @ mlp.W_out[sl]
        if c.kind == "bilinear":
            prod = (x @ mlp.W_bil_a[:, sl]) * (x @ mlp.W_bil_b[:, sl])
            return prod @ mlp.W_bil_out[sl]
        pre = x @ getattr(mlp, f"W_{c.kind}_in")[:, sl]
        gate = x @ getattr(mlp, f"W_{c.kind}_gate")[:, sl]
        val = torch.where(gate != 0, NATIVE_FUNCTIONS[c.kind](pre), torch.zeros_like(pre)) * gate
        return val @ getattr(mlp, f"W_{c.kind}_out")[sl]
