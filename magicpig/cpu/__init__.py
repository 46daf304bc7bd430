"""The MagicPIG CPU runtime: hash tables, retrieval and importance-weighted sparse attention over the
offloaded keys, in C++/OpenMP (``magicpig/csrc``), compiled on first use (``load()``; importing this
package compiles nothing).

Typical use, one layer of B sequences::

    layer = OffloadedLayer.build(keys, values, codes, counts, K=10, L=150)   # plan: once, after prefill
    out, lse, sampled = layer.attend(q, q_codes)                              # run: every decode step

The decoder's set-up (``magicpig.decoders.OffloadDecoder``) uses ``OffloadedLayer.from_prefill``: kernel 0
(``hash_keys``) hashes the centred prefill keys without materialising their projections, writes the codes
table-major, and the tables are built from that layout, one table per work item.

Kernels (``csrc/magicpig_cpu.h``): 0 hash_keys, 1 build_tables, 2 retrieve, 3 attend (sampled keys), 4 linear
(a decode step's linear layers, several matrices in one parallel region, optionally added to a residual:
``magicpig.decode_linear``), 5 exact_attend (exact decode attention: ``exact_kernel``), 6 attention_in /
mlp_residual (the two halves of a Llama-family layer around its attention: RMSNorm, rotary embedding,
SiLU MLP, over kernel 4; ``magicpig.decode_forward``), 7 append_kv, 8 prefill_attend (exact causal attention of
a bfloat16 prefill block on a CPU with AVX512-BF16: ``prefill``); on a CPU model a decode step of an offloaded
layer is one call, ``decode_step`` (0, 2, 3, then 5 for the static keys and the merge;
``OffloadedLayer.decode_step_fn``).

Modules: ``extension`` (build, load, build lock), ``env`` (ISA variant and threads: ``$MAGICPIG_ISA``,
``$MAGICPIG_THREADS``), ``tables`` (correction table, memory accounting), ``hashing`` (kernel 0 and its
projection tiles), ``layer`` (``OffloadedLayer``, ``exact_kernel``), ``prefill`` (kernel 8 and when it
applies; not imported here), ``check`` (``self_check``: the decode
path against the torch reference), ``torch_twin`` (the pure-torch layer with the same API, and the choice
between the two; not imported here).
"""
from magicpig.cpu.check import self_check
from magicpig.cpu.env import (ISA_CODES, ISA_ENV, MAX_MIN_COLLISIONS, THREADS_ENV, check_env, env_threads, isa,
                              isa_name, num_threads, physical_cores, resolve_isa, supported_isas)
from magicpig.cpu.extension import BUILD_DIR_ENV, BUILD_TIMEOUT_ENV, available, build_dir, build_timeout, load
from magicpig.cpu.hashing import hash_keys, shared_tiled_projections, tile_projections
from magicpig.cpu.layer import PREFETCH, SPLIT_TOKENS, OffloadedLayer, bits_to_ids, exact_kernel
from magicpig.cpu.tables import (TABLE_INTERVALS, TABLE_LIMIT, InsufficientMemoryError, check_fits,
                                 correction_table, estimate_nbytes, table_nbytes)

__all__ = ["BUILD_DIR_ENV", "BUILD_TIMEOUT_ENV", "ISA_CODES", "ISA_ENV", "MAX_MIN_COLLISIONS", "PREFETCH",
           "SPLIT_TOKENS", "TABLE_INTERVALS", "TABLE_LIMIT", "THREADS_ENV", "InsufficientMemoryError",
           "OffloadedLayer", "available", "bits_to_ids", "build_dir", "build_timeout", "check_env", "check_fits",
           "correction_table", "env_threads", "estimate_nbytes", "exact_kernel", "hash_keys", "isa", "isa_name",
           "load", "num_threads", "physical_cores", "resolve_isa", "self_check", "shared_tiled_projections",
           "supported_isas", "table_nbytes", "tile_projections"]
