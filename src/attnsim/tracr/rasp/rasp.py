"""tracr's ``rasp`` module, name for name, over attnsim's expressions and interpreter.

Every public name of ``tracr.rasp.rasp`` is here with tracr's meaning (the typing helpers and
modules tracr's module happens to import too, so that ``rasp.Sequence`` resolves as it does
there). The classes are attnsim's own (:mod:`attnsim.rasp`): a program built here compiles
with :func:`attnsim.compile_program` and with :func:`attnsim.tracr.compiler.compiling.
compile_rasp_to_model`. ``evaluate`` (and calling an expression) evaluates one sequence, as
tracr's ``DefaultRASPEvaluator`` does: ``None`` propagates through ``Map`` and
``SequenceMap`` without calling the function, an aggregate that selects nothing gives its
default.

>>> from attnsim.tracr.rasp import rasp
>>> prev = rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, lambda k, q: q == k + 1),
...                       rasp.tokens)
>>> rasp.evaluate(prev + 1, [1, 2, 3])
[None, 2, 3]
"""

# modules and typing names that tracr's rasp module exposes (tracr's `logging` is absl's)
import abc  # noqa: F401
import collections  # noqa: F401
import copy  # noqa: F401
import enum  # noqa: F401
import functools  # noqa: F401
import itertools  # noqa: F401
import logging  # noqa: F401
from collections.abc import Callable, Mapping, Sequence  # noqa: F401
from typing import Any, Dict, Generic, List, Optional, Protocol, TypeVar, Union  # noqa: F401, UP035

import numpy as np  # noqa: F401

from attnsim.rasp.evaluators import DefaultRASPEvaluator, RASPEvaluator
from attnsim.rasp.expr import (
    DEFAULT_ANNOTATORS,
    VT,
    Aggregate,
    Annotator,
    Comparison,
    ConstantSelector,
    ConstantSOp,
    Encoding,
    Full,
    IndicesType,
    LengthType,
    LinearSequenceMap,
    Map,
    NumericValue,
    Predicate,
    RASPExpr,
    RASPExprT,
    Select,
    Selector,
    SelectorAnd,
    SelectorNot,
    SelectorOr,
    SelectorValue,
    SelectorWidth,
    SequenceMap,
    SOp,
    SOpT,
    T,
    TokensType,
    Value,
    annotate,
    categorical,
    default_encoding,
    default_name,
    get_encoding,
    indices,
    is_categorical,
    is_numerical,
    length,
    numerical,
    selector_and,
    selector_not,
    selector_or,
    sop_not,
    tokens,
)

__all__ = [
    "DEFAULT_ANNOTATORS",
    "VT",
    "Aggregate",
    "Annotator",
    "Comparison",
    "ConstantSOp",
    "ConstantSelector",
    "DefaultRASPEvaluator",
    "Encoding",
    "Full",
    "IndicesType",
    "LengthType",
    "LinearSequenceMap",
    "Map",
    "NumericValue",
    "Predicate",
    "RASPEvaluator",
    "RASPExpr",
    "RASPExprT",
    "SOp",
    "SOpT",
    "Select",
    "Selector",
    "SelectorAnd",
    "SelectorNot",
    "SelectorOr",
    "SelectorValue",
    "SelectorWidth",
    "SequenceMap",
    "T",
    "TokensType",
    "Value",
    "annotate",
    "categorical",
    "default_encoding",
    "default_name",
    "evaluate",
    "get_encoding",
    "indices",
    "is_categorical",
    "is_numerical",
    "length",
    "numerical",
    "selector_and",
    "selector_not",
    "selector_or",
    "sop_not",
    "tokens",
]

# tracr's module-level evaluator: one sequence in, one value per position out
evaluate = DefaultRASPEvaluator().evaluate
