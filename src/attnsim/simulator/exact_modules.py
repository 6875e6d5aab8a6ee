"""Torch modules taken only as they are: a subclass that changes the function is refused.

:func:`~attnsim.simulator.adapters.from_torch` reads a module's weights and U computes the
torch class's own function from them. A subclass of ``nn.MultiheadAttention`` (or of a module
it calls) whose ``forward`` returns something else, a method set on the instance, or a
forward hook would be simulated as the base class, silently; :func:`check_exact` refuses
them unless the caller says that the module computes the base class's function
(``trust_subclass=True``).
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.nn.modules import module as _module

__all__ = ["check_exact", "check_parts", "global_hooks", "has_hooks"]

# methods a subclass may redefine without changing what the module computes (and the
# special names: constructors, repr, pickling, annotations), except those a call goes through
_HARMLESS = frozenset({"extra_repr", "reset_parameters", "_reset_parameters"})
_CALL_PATH = frozenset({"__call__", "__getattr__", "__getattribute__"})


def _may_change(name: str, base: type) -> bool:
    special = name.startswith("__") and name.endswith("__")
    if name in _HARMLESS or (special and name not in _CALL_PATH):
        return False
    return callable(getattr(base, name, None))


def check_exact(module: Any, base: type, where: str, trust: bool = False) -> None:
    """Refuses a ``base`` module whose call may compute another function than ``base``'s:
    a subclass that redefines ``forward`` (or any other method of ``base`` but its
    constructor, repr and other special methods outside the call path), a method set on the
    instance, or forward hooks.

    U reads the weights and computes ``base``'s own function; such a module may compute
    something else, which U would silently not simulate. ``trust`` accepts it.

    Raises:
        TypeError: the module is such a one and ``trust`` is False (the message names the
            methods and says what to do).

    >>> class Doubled(nn.ReLU):
    ...     def forward(self, x):
    ...         return 2 * super().forward(x)
    >>> check_exact(nn.ReLU(), nn.ReLU, "activation")
    >>> try:
    ...     check_exact(Doubled(), nn.ReLU, "activation")
    ... except TypeError as exc:
    ...     print(str(exc)[:72])
    activation is a Doubled, a subclass of torch.nn.ReLU that redefines forw
    """
    if trust or not isinstance(module, base):
        return
    changed = []
    for cls in type(module).__mro__:
        if cls is base:
            break
        changed += [k for k in vars(cls) if _may_change(k, base)]
    changed += [k for k in vars(module) if _may_change(k, base)]  # set on the object
    hooks = has_hooks(module)
    if not changed and not hooks:
        return
    if changed:
        what = (
            f"a {type(module).__qualname__}, a subclass of torch.nn.{base.__name__} that "
            f"redefines {', '.join(dict.fromkeys(changed))}"
        )
    else:
        what = f"a torch.nn.{base.__name__} with forward hooks, which may change its output"
    raise TypeError(
        f"{where} is {what}; U computes {base.__name__}'s own function from the weights, which "
        "this module may not compute: if it does (the change only logs or checks), read it "
        "with from_torch(module, trust_subclass=True) (from_torch_stack for an encoder) and "
        "simulate that spec; otherwise build the spec of what it computes"
    )


def has_hooks(module: Any) -> bool:
    """Whether a call of ``module`` runs forward hooks: its own or torch's global ones.

    >>> m = nn.ReLU()
    >>> has_hooks(m), has_hooks(m.register_forward_hook(lambda *a: None) and m)
    (False, True)
    """
    own = ("_forward_hooks", "_forward_pre_hooks")
    return any(getattr(module, n, None) for n in own) or global_hooks()


def global_hooks() -> bool:
    """Whether torch calls hooks on every module's forward
    (``torch.nn.modules.module.register_module_forward_hook`` and its pre-hook twin).

    >>> global_hooks()
    False
    """
    return bool(
        getattr(_module, "_global_forward_hooks", None)
        or getattr(_module, "_global_forward_pre_hooks", None)
    )


def check_parts(module: nn.Module, trust: bool) -> None:
    """Every module whose call a MultiheadAttention or encoder layer makes: exact classes."""
    if isinstance(module, nn.MultiheadAttention):
        check_exact(module, nn.MultiheadAttention, "the module", trust)
        return
    check_exact(module, nn.TransformerEncoderLayer, "the module", trust)
    check_exact(module.self_attn, nn.MultiheadAttention, "its self_attn", trust)
    for name, base in (("linear1", nn.Linear), ("linear2", nn.Linear), ("norm1", nn.LayerNorm),
                       ("norm2", nn.LayerNorm), ("dropout", nn.Dropout),
                       ("dropout1", nn.Dropout), ("dropout2", nn.Dropout)):  # fmt: skip
        check_exact(getattr(module, name, None), base, f"its {name}", trust)
    for base in (nn.ReLU, nn.GELU):
        check_exact(module.activation, base, "its activation", trust)
