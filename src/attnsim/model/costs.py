"""Every number with which the runtime chooses how to run a model, in one table.

The executors (:mod:`attnsim.model.runtime`, :mod:`attnsim.model.plans` and the plan
modules, :mod:`attnsim.model.fused`, the sparse storage :mod:`attnsim.model.sparse`) read
these and nothing else to choose between ways of computing the same thing. Every way they
choose between gives the definition's outputs (:mod:`attnsim.model.transformer`; the
differential tests in tests/test_plans*.py, tests/test_runtime*.py and
tests/test_sparse*.py run each path against it), so a number here changes speed or memory,
never a result. Two kinds:

- **Bounds** on what one step may hold: chunk, part and cache sizes. They bound peak memory
  (and what is kept between calls).
- **Break-even points** between two exact paths, measured on the machines in
  docs/benchmarks.md (one CPU thread, float64). Where a measurement is recorded, it is in
  the comment; ``benchmarks/`` times the paths they choose between.

A module reads each number under its own name (``from attnsim.model.costs import ...``), so
a test that lowers one patches it where it is read (``monkeypatch.setattr(plan_core,
"STREAM_BYTES", ...)``).

>>> MIN_PART <= PLANS_KEPT and BLOCK * 8 == 4096
True
"""

from __future__ import annotations

# -- bounds: memory one step may take ------------------------------------------------------

# the dense definition's heads run in chunks of about this many [batch, head, query, key]
# values (model.hard, model.transformer)
HEAD_CHUNK_VALUES = 1 << 25
# hidden activations per slice of a wide ReLU layer in the definition (model.transformer)
RELU_SLICE_VALUES = 1 << 21
# query rows x keys per chunk of scores while a plan is built (model.plan_core)
ROWS_PER_CHUNK = 1 << 22
# batch x selected pairs x width per pass of a sparse sum over a static pattern
# (model.plan_static, model.plan_core, model.plan_tables)
PAIRS_PER_CHUNK = 1 << 24
# sequences x classes x (width + positions) per pass of a static-query head (model.plan_keys)
MAX_CLASS_VALUES = 1 << 21
# a head group's [head, width, query, key, batch] values the feature-major executor
# broadcasts at once (model.fused)
BROADCAST_VALUES = 1 << 21
# positions x terms per slice of a sparse product or a planned mean (model.sparse_ops,
# model.sparse_plans)
TERMS_PER_CHUNK = 1 << 23
# the most one part of a sparse head's values takes; a narrower head runs whole
# (model.head_parts)
PART_BYTES = 64 << 20
# the token-position embedding table is kept up to this size (model.runtime)
TABLE_BYTES = 8 << 20
# execution plans kept per model, one per input length: the least recently built goes
# (model.runtime, model.sparse)
PLANS_KEPT = 32
# compiled feature-major passes kept per model (executor "jit"), one per input signature:
# the least recently compiled goes (model.fused)
COMPILED_KEPT = 16
# executor "jit" times the compiled feature-major pass and the plans this many times each on
# the first call of an input signature, and keeps the faster (model.runtime)
MEASURED_RUNS = 3
# a planned way of running a head (a certificate, a one-sided head, classes of rows) or an
# MLP's grouped rows that fails on this many calls is not tried again: the head or MLP runs
# the general way from then on (model.plans, model.plan_core, model.sparse_plans; jit's
# measurement runs the plans this many times before timing them, model.runtime)
TRIES = 2
# the sparse storage's sublayer-read tables kept per model, one per plan set (model.sparse)
READS_KEPT = 40

# -- the sparse storage's rows (model.store, model.block_rows, model.stream) ----------------

# a store whose rows would take at least BLOCKED_STORE_BYTES, each row at least
# BLOCKED_ROW_VALUES values (batch x positions), holds its rows in blocks of positions: it
# then takes memory, resident and reserved, only where writes are non-zero, at the cost of
# an index per block (a smaller store is faster as one tensor)
BLOCKED_ROW_VALUES = 1 << 13
BLOCKED_STORE_BYTES = 2 << 30
# positions per block: 4 KiB of float64, a memory page's worth per sequence
BLOCK = 512
# the memory one chunk of blocks takes (the most held unused)
CHUNK_BYTES = 256 << 20
# bytes from which a new stream asks for huge pages (Linux; nothing elsewhere)
HUGE_FROM = 1 << 25

# -- break-even points: which executor runs a model (model.fused, model.runtime) ------------

# "auto" runs short inputs feature-major (model.fused) while all of these hold, else by the
# plans: positions, model width, multiply-adds per sequence (float64 counts twice) ...
FUSED_MAX_POSITIONS = 32
FUSED_MAX_D_MODEL = 1024
FUSED_MAX_WORK = 400_000
# ... for a model whose heads the plans run as gathers
FUSED_STATIC_WORK = 32_000
# ... for a model of constant heads and gathers
FUSED_CONST_WORK = 64_000
# ... and those heads' [query, key] work at most this
FUSED_STATIC_QUADRATIC = 2_800
# the feature-major executor embeds by a one-hot product for models wider than
# ONE_HOT_MIN_WIDTH with at most ONE_HOT_VOCAB tokens, else by an indexed gather of W_E's
# columns (measured, 256 sequences: frac_prevs at length 20, d_model 26, 4 tokens, 114 us
# against 287 us; hist at 5, d_model 13, 44 us against 23 us; exact, one 1 per column)
ONE_HOT_VOCAB = 64
ONE_HOT_MIN_WIDTH = 16
# a feature-major weight that reads (or writes) more than this share of the residual rows
# multiplies all of them (the others add exact zeros) rather than gathering its rows first;
# so does a planned projection's product of columns of more than two weights
# (model.projection)
DENSE_SHARE = 0.75
# ... and a model no wider than DENSE_WIDTH multiplies all of them always: gathering rows
# costs more per call than the products it saves (measured one process, both ways in turn,
# batch 256: hist, count, shift_by and frac_prevs at length 5, d_model 11-13, 1.07-1.21x
# faster; count at length 10, d_model 17, 0.87x: there gathering is faster)
DENSE_WIDTH = 16

# -- break-even points: the plan executor (model.plan_core, model.plan_keys, ...) ------------

# the plan executor runs a batch in parts whose stream takes at most about STREAM_BYTES:
# larger temporaries come from fresh pages of the system allocator each time (measured:
# hist at length 160, batch 256, 61 ms per batch as one part, 26 ms in parts of 32); parts
# of fewer than MIN_PART sequences spend more on per-call costs than they save
STREAM_BYTES = 1 << 23
MIN_PART = 16
# a function of each row runs once per distinct row when the batch has at least
# DISTINCT_MIN_ROWS rows, the function at least DISTINCT_MIN_WORK multiply-adds per row,
# and the work saved on the repeated rows exceeds what grouping costs (about GROUP_WORK +
# 4 x width per row: a product, a sort, an exact check and a gather)
DISTINCT_MIN_ROWS = 256
DISTINCT_MIN_WORK = 1024
GROUP_WORK = 64
# a one-sided head's dynamic side runs over its distinct rows while these are at most this
# share of the positions (and at least MIN_DISTINCT_ROWS may always be): more distinct rows
# cost about as much as the dense scores, which run instead
MAX_ROW_SHARE = 0.5
MIN_DISTINCT_ROWS = 8
# classes x directions up to which a token-table head compares every position with every
# class rather than sorting the positions' rows first (measured: 5 classes of 6 directions
# compare in a fraction of the sort's time, 81 of 82 take several times longer), and the
# positions (BOS included) from which a sorted lookup pays (model.plan_tables)
DIRECT_LOOKUP = 256
UNIQUE_MIN_LENGTH = 41
# MLP groups run as step plans between MIN_UNITS and MAX_UNITS units (smaller ones cost
# less as they are, measured: 20 units, 256 x 11; larger ones, ReLU-realised maps, keep
# their dense units); a plateau writing at most FLAT_TERMS outputs runs as a scatter,
# unless the plan writes at most ROW_TABLE_WIDTH columns: then each position's whole row
# of outputs is gathered from its interval's row and added (measured on hist's selector
# width, 256 sequences: 21 columns at length 20, 0.22-0.25 ms against 0.32-0.33 ms for the
# scatter; 41 columns at length 40, 0.85 against 0.75-0.78 ms) (model.plan_steps)
MAX_UNITS = 1024
MIN_UNITS = 32
FLAT_TERMS = 4
ROW_TABLE_WIDTH = 32
# columns in fewer runs than this are copied run by run; more, by one index
# (model.projection)
RUNS = 8
# a layer's planned gathers that move at most BATCH_CELLS value cells each run as one batch
# of index operations (model.gather_batch): one at a time, each costs a few dozen small
# tensor operations, about what gathering this many cells costs (U's transposes: hundreds
# of heads of width 1 in a layer)
BATCH_CELLS = 1 << 14
# a planned gather over every position copies its keys run by run (a run: queries that read
# one key, or consecutive keys) when its runs average at least RUN_POSITIONS positions, else
# by one index (measured on U's rows of 18,433 positions, 385 columns: 13 runs copied in
# 30 ms against an indexed copy's 117 ms) (model.sparse_plans)
RUN_POSITIONS = 64
# a sparse product on rows of at least ROW_BY_TERM values held as one tensor goes term by
# term, each a product into one scratch row and an add into its column (measured on U's
# rows of 18,433 values: 51 against 116 us per term); shorter rows go by slices, where one
# call per term would cost more than the row (about 3 us) (model.sparse_ops)
ROW_BY_TERM = 1 << 12
