"""Generation engine: exact prefill once, then decode with any attention method.

API contract (other modules, e.g. ``magicpig eval``, code against exactly this)::

    from magicpig.engine import Engine, GenerationConfig, GenerationResult
    engine = Engine(model, tokenizer, backend="reference")          # or "offload"
    engine = Engine(model, tokenizer, options=DecodeOptions(backend="offload", offload_dtype="bfloat16"))
    pre = engine.prefill(prompt_ids)   # list[int] (one prompt) or list[list[int]] (a batch); exact prefill
    results = engine.decode(pre, method, GenerationConfig(max_new_tokens=32, stop=["\\n"], do_sample=False,
                            seed=0), continuation_ids=None)
    # continuation_ids (setup B): ids fed one decode step at a time with the method before generating;
    # list[int] (every row) or list[list[int]] (one per row). None = setup A.
    # decode never mutates `pre` (fork semantics); method is an AttentionMethod or a spec string
    # -> list[GenerationResult] with .text, .token_ids, .new_tokens, .cost (float: mean used/candidates
    #    over sparse layers, heads, steps), .cost1, .seconds, .tokens_per_s, .prompt_tokens, .timings
    #    (seconds by part: setup, hash, cpu_attend, cpu_retrieve, cpu_wait, transfer, exact),
    #    .layer_decoders (per layer: "reference", "exact" or "offload")
    results = engine.generate(prompt_ids, method, config)   # prefill + decode
    table = engine.fork(pre, ["dense", "magicpig:K=10,L=150"], config)  # {spec: list[GenerationResult]}

Batches: prompts of different lengths are left-padded; ``KeyLayout(start, prompt_end)`` tells the methods
where each row's keys begin. Prefill runs in chunks of ``prefill_chunk`` tokens (exact attention, query
blocks through SDPA) and keeps only the last position's logits. ``prefill_dtype`` (``magicpig.prefill_dtype``)
is the dtype of its matrix products: ``float32`` by default (the exact prefill, equal to sdpa's), ``bfloat16``
or ``auto`` (bfloat16 on a CPU with AVX512-BF16 / AMX, as ``magicpig eval`` and ``generate`` default to);
the keys and values handed to decode are in the model's dtype either way.

Cost: for every decode forward in which a row consumes a real token, each sparse layer (not in
``method.dense_layer_set``) contributes used/candidates averaged over heads; ``cost`` is the mean over
sparse layers and those steps (Cost2 of the paper), ``cost1`` the method's search cost
(``magicpig.cache.CostMeter``). A decode that needs no forward (one new token in setup A) reports cost 0.
"""
from __future__ import annotations

import inspect
import itertools
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from magicpig import attention as _attention
from magicpig.active_layer import clear_active
from magicpig.backends import DEFAULT_BACKEND
from magicpig.cache import CostMeter, MagicPIGCache
from magicpig.cpu.torch_twin import offload_layer_class
from magicpig.decode_forward import DecodeForward, unsupported_reason
from magicpig.decode_linear import decode_linears, resolve_linear_impl
from magicpig.methods import AttentionMethod, KeyLayout, parse_method
from magicpig.methods.exact import Dense
from magicpig.models import max_context
from magicpig.options import SETUPS, DecodeOptions
from magicpig.prefill_dtype import prefill_autocast, resolve_prefill_dtype


@dataclass
class GenerationConfig:
    """Decoding settings. ``stop``: strings that end generation (the text is cut before them);
    ``eos_token_ids``: None = the model's and tokenizer's EOS ids; ``return_logits`` keeps the float32
    logits each generated token was chosen from (for tests)."""

    max_new_tokens: int = 32
    stop: Sequence[str] = ()
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    eos_token_ids: Sequence[int] | None = None
    ignore_eos: bool = False
    return_logits: bool = False

    def __post_init__(self):
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {self.max_new_tokens!r}")
        if isinstance(self.stop, str):
            self.stop = (self.stop,)
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop must be a list of non-empty strings, got {self.stop!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")


@dataclass
class GenerationResult:
    """One row's decode. ``token_ids`` are the generated ids (EOS and stop text excluded from ``text``,
    the EOS id excluded from ``token_ids``). ``seconds``: wall time of the decode loop of the whole batch
    (``tokens_per_s`` = new_tokens / seconds); ``setup_seconds``: building the decoders from the prefill
    (centering, hashing, offloading, table build); ``step_seconds``: wall time of each decode forward;
    ``timings``: where the decode's time went, seconds summed over its steps (batch-wide): ``setup`` and
    the keys of ``magicpig.decoders.TIMING_KEYS`` (``hash``, ``cpu_attend``, ``cpu_retrieve``,
    ``cpu_wait``, ``transfer``, ``exact``; 0 where a backend has no such part, e.g. the reference
    backend). ``layer_decoders``: the decoder each layer of the model used, one name per layer
    (``magicpig.decoders.DECODER_KINDS``: ``reference`` = the method's own attend on the device,
    ``exact`` = fused exact attention, ``offload`` = the device + CPU split), batch-wide. ``linear``: who
    computed the decode step's linear layers (``magicpig`` = the CPU module's kernel 4, or ``torch``);
    ``forward``: who ran its layer loop (``magicpig`` = ``magicpig.decode_forward``, or ``transformers``)."""

    text: str
    token_ids: list[int]
    new_tokens: int
    cost: float
    cost1: float
    seconds: float
    tokens_per_s: float
    prompt_tokens: int
    method: str = ""
    backend: str = ""
    stop_reason: str = "length"  # "eos" | "stop" | "length"
    continuation_tokens: int = 0
    decode_steps: int = 0
    setup_seconds: float = 0.0
    step_seconds: list[float] = field(default_factory=list, repr=False)
    timings: dict[str, float] = field(default_factory=dict)
    logits: list[torch.Tensor] | None = field(default=None, repr=False)
    layer_decoders: list[str] = field(default_factory=list)
    linear: str = ""
    forward: str = ""

    @property
    def total_cost(self) -> float:
        return self.cost + self.cost1


@dataclass
class Prefill:
    """Result of an exact prefill; read-only for decoders.

    keys / values: per layer (B, H_kv, n, d) on the model's device; layout: KeyLayout(n, start,
    prompt_end = n); logits: (B, V) float32 of the last prompt position; prompt_ids: the unpadded prompts.
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    layout: KeyLayout
    logits: torch.Tensor
    prompt_ids: list[list[int]]
    seconds: float

    @property
    def batch(self) -> int:
        return len(self.prompt_ids)

    @property
    def n(self) -> int:
        return self.layout.n

    @property
    def lengths(self) -> list[int]:
        return [len(p) for p in self.prompt_ids]


def _rows(ids: Any, what: str) -> list[list[int]]:
    """list[int] -> [list]; list[list[int]] -> itself (validated)."""
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    if not isinstance(ids, (list, tuple)) or not ids:
        raise ValueError(f"{what} must be a non-empty list of token ids or a list of such lists")
    rows = [list(ids)] if all(isinstance(t, int) for t in ids) else [list(r) for r in ids]
    for r in rows:
        if not r and what == "prompt_ids":
            raise ValueError("prompt_ids: every prompt needs at least one token")
        if any(not isinstance(t, int) or t < 0 for t in r):
            raise ValueError(f"{what} must hold non-negative integer token ids")
    return rows


class StopStrings:
    """Finds the first stop string in one row's answer as its tokens arrive, decoding only the tail.

    ``check(tokens)`` after each appended token: the answer (``tokenizer.decode(tokens,
    skip_special_tokens=True)``) cut before the first stop string it contains, or None while it contains
    none. Each call decodes a window of the last tokens that holds at least the longest stop string plus
    ``MARGIN`` characters before the newest token (the window grows, by doubling, until it does); only when
    a stop string shows in the window is the whole answer decoded, so the cut text is the whole decode's.
    The margin absorbs what a window's start may decode differently (a split UTF-8 character, a dropped
    leading space).
    """

    MARGIN = 8

    def __init__(self, tokenizer, stop: Sequence[str]):
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.context = max(len(s) for s in self.stop) + self.MARGIN
        self.window = 4  # tokens decoded per call, before the newest one

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def check(self, tokens: list[int]) -> str | None:
        newest = len(self._decode(tokens[-1:]))
        while True:
            lo = max(0, len(tokens) - 1 - self.window)
            tail = self._decode(tokens[lo:])
            if lo == 0 or len(tail) >= self.context + newest:
                break
            self.window *= 2
        if not any(s in tail for s in self.stop):
            return None
        text = self._decode(tokens)
        cut = min((text.find(s) for s in self.stop if s in text), default=-1)
        return text[:cut] if cut >= 0 else None


@dataclass
class _Run:
    """One decode of a batch (``Engine.decode``): its settings, its cache and each row's state."""

    method: AttentionMethod
    config: GenerationConfig
    cache: MagicPIGCache
    eos: set[int]
    sampler: torch.Generator  # draws the sampled tokens
    forced: list[list[int]]  # per row: ids fed one decode step at a time before generating (setup B)
    stops: list[StopStrings | None]
    generated: list[list[int]]
    kept_logits: list[list[torch.Tensor]]
    texts: list[str]  # per row: set when a stop string ends it
    done: list[bool]
    reason: list[str]
    costs: CostMeter
    setup_seconds: float = 0.0
    step_seconds: list[float] = field(default_factory=list)


class Engine:
    """Prefill/decode driver around a transformers causal LM (Llama / Qwen2 / Mistral family).

    The model is switched to the ``magicpig`` attention implementation (exact in prefill, so its prefill
    outputs equal sdpa's). options: the ``DecodeOptions`` of every decode (or its fields as keyword
    arguments: ``backend``, ``offload_impl``, ``concurrent``, ``offload_dtype``, ``linear_impl`` for its
    ``linear``, ``decode_forward`` for its ``forward`` and ``decode_weights`` for its ``weights``); each
    result's ``linear`` and ``forward`` say which implementation ran. prefill_chunk: prompt tokens per
    prefill forward; allow_long_context: permit contexts beyond ``max_position_embeddings``; prefill_dtype:
    ``float32`` (default: exact) / ``bfloat16`` / ``auto`` (``magicpig.prefill_dtype``), kept resolved in
    ``prefill_dtype``.

    >>> import torch, transformers
    >>> from magicpig import Engine, GenerationConfig
    >>> _ = torch.manual_seed(0)
    >>> config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
    ...                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    >>> engine = Engine(transformers.LlamaForCausalLM(config).eval())
    >>> pre = engine.prefill([3 + i % 60 for i in range(200)])  # one prompt of 200 tokens, prefilled once
    >>> table = engine.fork(pre, ["dense", "magicpig:K=4,L=8,sinks=2,local=8"],
    ...                     GenerationConfig(max_new_tokens=4, ignore_eos=True))
    >>> [(spec, rows[0].new_tokens) for spec, rows in table.items()]
    [('dense', 4), ('magicpig:K=4,L=8,sinks=2,local=8', 4)]
    >>> table["dense"][0].cost, 0 < table["magicpig:K=4,L=8,sinks=2,local=8"][0].cost < 1
    (1.0, True)
    """

    def __init__(self, model, tokenizer=None, backend: str = DEFAULT_BACKEND, *, prefill_chunk: int = 4096,
                 offload_impl: str = "auto", concurrent: bool = True, allow_long_context: bool = False,
                 offload_dtype: Any = None, linear_impl: str = "auto", decode_forward: str = "auto",
                 decode_weights: str = "model", options: DecodeOptions | None = None,
                 prefill_dtype: str = "float32"):
        self.options = DecodeOptions.of(options, backend=backend, offload_impl=offload_impl, concurrent=concurrent,
                                        offload_dtype=offload_dtype, linear=linear_impl, forward=decode_forward,
                                        weights=decode_weights)
        if not isinstance(prefill_chunk, int) or prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be a positive integer, got {prefill_chunk!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.prefill_chunk = prefill_chunk
        self.allow_long_context = allow_long_context
        _attention.use_hook(model)
        if self.backend == "offload":  # build/load the CPU module now, not inside the first decode's timing
            offload_layer_class(self.options.offload_impl)
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.device = next(model.parameters()).device
        self.prefill_dtype = resolve_prefill_dtype(prefill_dtype, self.device.type)
        self._kv_dtype = getattr(model, "dtype", None) or next(model.parameters()).dtype  # what decode reads
        self.max_context = max_context(model.config)
        if resolve_linear_impl(self.options.linear, self.device) == "magicpig":
            from magicpig import cpu

            cpu.load()  # built here, not inside the first decode's timing
        self.step_forward = self._choose_forward(self.options.forward)

    @property
    def backend(self) -> str:
        return self.options.backend

    def _choose_forward(self, impl: str) -> DecodeForward | None:
        """Our decode loop (``forward`` ``magicpig`` / ``auto``) or None (transformers' forward)."""
        if impl == "transformers":
            return None
        reason = unsupported_reason(self.model)
        if reason is None and resolve_linear_impl(self.options.linear, self.device) != "magicpig":
            reason = f"linear_impl={self.options.linear!r} resolves to torch here (the loop runs kernel 4)"
        if reason is not None:
            if impl == "magicpig":
                raise ValueError(f"decode_forward='magicpig' cannot run this model: {reason}")
            return None
        return DecodeForward(self.model, self.options.weights)

    # ---- helpers -------------------------------------------------------------------------------------
    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        for cand in (getattr(tok, "pad_token_id", None), getattr(tok, "eos_token_id", None)):
            if isinstance(cand, int):
                return cand
        return 0

    def eos_ids(self, config: GenerationConfig) -> set[int]:
        if config.ignore_eos:
            return set()
        if config.eos_token_ids is not None:
            return set(int(t) for t in config.eos_token_ids)
        ids: set[int] = set()
        gen = getattr(self.model, "generation_config", None)
        for src in (getattr(gen, "eos_token_id", None), getattr(self.model.config, "eos_token_id", None),
                    getattr(self.tokenizer, "eos_token_id", None)):
            if isinstance(src, int):
                ids.add(src)
            elif isinstance(src, (list, tuple)):
                ids.update(int(t) for t in src)
        return ids

    def _check_length(self, total: int, what: str) -> None:
        if self.max_context and total > self.max_context and not self.allow_long_context:
            raise ValueError(
                f"{what} of {total} tokens exceeds the model's max_position_embeddings = {self.max_context}; "
                "pass allow_long_context=True (CLI: --allow-long-context) to run beyond the trained length")

    def check_method(self, method: AttentionMethod | str) -> AttentionMethod:
        """Parse ``method`` and check it against this model (``dense_layers`` within its layers), before
        any prefill."""
        method = parse_method(method)
        config = self.model.config
        config = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        method.dense_layer_set(int(config.num_hidden_layers))
        return method

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, cache, mask: torch.Tensor | None):
        kwargs = {self._cache_kw: cache}
        return self.model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True,
                          logits_to_keep=1, **kwargs)

    # ---- prefill -------------------------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, prompt_ids) -> Prefill:
        """Exact prefill of one prompt (list[int]) or a batch (list[list[int]], left-padded)."""
        rows = _rows(prompt_ids, "prompt_ids")
        B, n = len(rows), max(len(r) for r in rows)
        self._check_length(n, "prompt")
        t0 = time.perf_counter()
        ids = torch.full((B, n), self.pad_id, dtype=torch.long)
        start = torch.tensor([n - len(r) for r in rows], dtype=torch.long)
        for b, r in enumerate(rows):
            ids[b, n - len(r):] = torch.tensor(r, dtype=torch.long)
        positions = (torch.arange(n)[None] - start[:, None]).clamp_min(0)
        padded = bool((start > 0).any())
        mask2d = (torch.arange(n)[None] >= start[:, None]).long() if padded else None
        ids, positions = ids.to(self.device), positions.to(self.device)
        mask2d = mask2d.to(self.device) if mask2d is not None else None
        cache = MagicPIGCache(self.model, Dense(), prefill_only=True)
        try:
            out = None
            with prefill_autocast(self.prefill_dtype, self.device.type):
                for lo in range(0, n, self.prefill_chunk):
                    hi = min(n, lo + self.prefill_chunk)
                    out = self._forward(ids[:, lo:hi], positions[:, lo:hi], cache,
                                        mask2d[:, :hi] if mask2d is not None else None)
        finally:
            clear_active()
        logits = out.logits[:, -1].float()
        keys = [l.keys.to(self._kv_dtype) for l in cache.layers]  # no copy when already in the model's dtype
        values = [l.values.to(self._kv_dtype) for l in cache.layers]
        self._sync()
        layout = KeyLayout(n, start.to(self.device), torch.full((B,), n, dtype=torch.long, device=self.device))
        return Prefill(keys, values, layout, logits, rows, time.perf_counter() - t0)

    # ---- decode --------------------------------------------------------------------------------------
    def _choose(self, logits: torch.Tensor, config: GenerationConfig, gen: torch.Generator) -> int:
        """logits (V,) float32 -> token id (greedy or sampled)."""
        if not config.do_sample:
            return int(torch.argmax(logits))
        x = logits.detach().float().cpu() / config.temperature
        if config.top_k:
            kth = torch.topk(x, min(config.top_k, x.numel())).values[-1]
            x = x.masked_fill(x < kth, float("-inf"))
        if config.top_p < 1:
            sorted_x, order = torch.sort(x, descending=True)
            probs = torch.softmax(sorted_x, -1)
            drop = probs.cumsum(-1) - probs >= config.top_p
            x[order[drop]] = float("-inf")
        return int(torch.multinomial(torch.softmax(x, -1), 1, generator=gen))

    @torch.no_grad()
    def decode(self, pre: Prefill, method: AttentionMethod | str, config: GenerationConfig | None = None,
               continuation_ids=None, after_step: Callable[[int], None] | None = None) -> list[GenerationResult]:
        """Decode every row of ``pre`` with ``method`` (see the module docstring); ``pre`` is not changed.
        after_step(i): called after decode forward i (0-based) has been timed, outside its time (the decode
        benchmark measures the machine's bandwidth there)."""
        return self._decode(pre, self.check_method(method), config or GenerationConfig(), continuation_ids,
                            after_step)

    def _decode(self, pre: Prefill, method: AttentionMethod, config: GenerationConfig, continuation_ids,
                after_step: Callable[[int], None] | None = None) -> list[GenerationResult]:
        """The decode loop: choose each row's next token, run one forward, until every row is done."""
        run = self._start(pre, method, config, continuation_ids)
        position = torch.tensor(pre.lengths, dtype=torch.long, device=self.device)
        logits = pre.logits
        t0 = time.perf_counter()
        # our loop calls kernel 4 itself; transformers' forward reaches it through the patched nn.Linear modules
        with nullcontext("magicpig") if self.step_forward is not None else decode_linears(
                self.model, self.options.linear, self.options.weights) as linear:
            try:
                for step in itertools.count():
                    tokens, active = self._next_tokens(run, logits, step)
                    if not any(active):
                        break
                    t_step = time.perf_counter()
                    logits = self._decode_step(tokens, position, run.cache)
                    position += 1
                    self._sync()
                    run.step_seconds.append(time.perf_counter() - t_step)
                    run.costs.add(run.cache.pop_step(), torch.tensor(active, dtype=torch.bool))
                    if after_step is not None:
                        after_step(step)
            finally:
                clear_active()
        self._sync()
        return self._results(run, pre, linear, time.perf_counter() - t0)

    def _start(self, pre: Prefill, method: AttentionMethod, config: GenerationConfig, continuation_ids) -> _Run:
        """A decode's state, with every layer's decoder built from ``pre`` (timed as ``setup_seconds``)."""
        B = pre.batch
        if continuation_ids is None:
            forced = [[] for _ in range(B)]
        else:
            forced = _rows(continuation_ids, "continuation_ids")
            if len(forced) == 1 and B > 1:
                forced = forced * B
            if len(forced) != B:
                raise ValueError(f"continuation_ids has {len(forced)} rows for a batch of {B} prompts")
        self._check_length(pre.n + max(len(f) for f in forced) + config.max_new_tokens, "prompt + decode")
        method_gen = torch.Generator(device="cpu").manual_seed(int(config.seed) + 1)
        checks_stop = bool(config.stop) and self.tokenizer is not None
        run = _Run(method=method, config=config,
                   cache=MagicPIGCache(self.model, method, generator=method_gen, options=self.options),
                   eos=self.eos_ids(config), sampler=torch.Generator(device="cpu").manual_seed(int(config.seed)),
                   forced=forced, stops=[StopStrings(self.tokenizer, config.stop) if checks_stop else None
                                         for _ in range(B)],
                   generated=[[] for _ in range(B)], kept_logits=[[] for _ in range(B)], texts=[""] * B,
                   done=[config.max_new_tokens == 0] * B, reason=["length"] * B, costs=CostMeter(B))
        t_setup = time.perf_counter()
        run.cache.start_decoding(pre.keys, pre.values, pre.layout)
        self._sync()
        run.setup_seconds = time.perf_counter() - t_setup
        return run

    def _next_tokens(self, run: _Run, logits: torch.Tensor, step: int) -> tuple[list[int], list[bool]]:
        """The token each row feeds to decode forward ``step`` (its forced id, its chosen next token, or
        padding once done) and whether it is a real token. logits: (B, V) float32 of the last forward."""
        tokens, active = [], []
        for b in range(len(run.done)):
            if step < len(run.forced[b]):
                tokens.append(run.forced[b][step])
                active.append(True)
                continue
            if run.done[b]:
                tokens.append(self.pad_id)
                active.append(False)
                continue
            tok = self._choose(logits[b], run.config, run.sampler)
            if run.config.return_logits:
                run.kept_logits[b].append(logits[b].detach().float().cpu().clone())
            self._accept(run, b, tok)
            tokens.append(tok if not run.done[b] else self.pad_id)
            active.append(not run.done[b])
        return tokens, active

    @staticmethod
    def _accept(run: _Run, b: int, tok: int) -> None:
        """Row ``b`` chose ``tok``: it ends at EOS (not kept), at a stop string, or at max_new_tokens."""
        if tok in run.eos:
            run.done[b], run.reason[b] = True, "eos"
            return
        run.generated[b].append(tok)
        text = run.stops[b].check(run.generated[b]) if run.stops[b] is not None else None
        if text is not None:
            run.texts[b] = text
            run.done[b], run.reason[b] = True, "stop"
        elif len(run.generated[b]) >= run.config.max_new_tokens:
            run.done[b] = True

    def _decode_step(self, tokens: list[int], position: torch.Tensor, cache: MagicPIGCache) -> torch.Tensor:
        """One decode forward of one token per row at ``position`` (B,) -> next-token logits (B, V) float32."""
        ids = torch.tensor(tokens, dtype=torch.long, device=self.device)[:, None]
        if self.step_forward is not None:
            return self.step_forward(ids, position[:, None], cache)
        return self._forward(ids, position[:, None], cache, None).logits[:, -1].float()

    def _results(self, run: _Run, pre: Prefill, linear: str, seconds: float) -> list[GenerationResult]:
        timings = {"setup": run.setup_seconds, **run.cache.timings}
        layer_decoders = run.cache.layer_decoders
        results = []
        for b, generated in enumerate(run.generated):
            text = run.texts[b]
            if run.reason[b] != "stop" and self.tokenizer is not None:
                text = self.tokenizer.decode(generated, skip_special_tokens=True)
            cost, cost1, steps = run.costs.row(b, run.cache.has_sparse_layers)
            results.append(GenerationResult(
                text=text, token_ids=generated, new_tokens=len(generated), cost=cost, cost1=cost1,
                seconds=seconds, tokens_per_s=len(generated) / seconds if seconds > 0 else math.inf,
                prompt_tokens=len(pre.prompt_ids[b]), method=run.method.spec(), backend=self.backend,
                stop_reason=run.reason[b], continuation_tokens=len(run.forced[b]), decode_steps=int(steps),
                setup_seconds=run.setup_seconds, step_seconds=list(run.step_seconds), timings=dict(timings),
                logits=run.kept_logits[b] if run.config.return_logits else None,
                layer_decoders=list(layer_decoders), linear=linear,
                forward="magicpig" if self.step_forward is not None else "transformers"))
        return results

    def generate(self, prompt_ids, method: AttentionMethod | str, config: GenerationConfig | None = None,
                 continuation_ids=None) -> list[GenerationResult]:
        """prefill + decode."""
        method = self.check_method(method)  # spec errors before the expensive prefill
        return self._decode(self.prefill(prompt_ids), method, config or GenerationConfig(), continuation_ids)

    def answer(self, context_ids, question_ids, method: AttentionMethod | str,
               config: GenerationConfig | None = None, setup: str = "A") -> list[GenerationResult]:
        """Evaluation setups. ``A`` (default, the paper's): prefill context + question
        exactly, then decode. ``B``: prefill the context, feed the question one decode step at a time
        with the method, then decode. context_ids / question_ids: one prompt or a batch (same rows)."""
        if setup not in SETUPS:
            raise ValueError(f"setup must be one of {', '.join(SETUPS)}, got {setup!r}")
        method = self.check_method(method)
        ctx, qs = _rows(context_ids, "context_ids"), _rows(question_ids, "question_ids")
        if len(qs) == 1 and len(ctx) > 1:
            qs = qs * len(ctx)
        if len(qs) != len(ctx):
            raise ValueError(f"question_ids has {len(qs)} rows for {len(ctx)} contexts")
        prompts = [c + q for c, q in zip(ctx, qs)] if setup == "A" else ctx
        return self._decode(self.prefill(prompts), method, config or GenerationConfig(),
                            None if setup == "A" else qs)

    def fork(self, pre: Prefill, methods: Sequence[AttentionMethod | str],
             config: GenerationConfig | None = None, continuation_ids=None) -> dict[str, list[GenerationResult]]:
        """Decode one prefill with several methods (the prefill is paid once). Keyed by method spec."""
        parsed = [self.check_method(m) for m in methods]
        return {m.spec(): self._decode(pre, m, config or GenerationConfig(), continuation_ids) for m in parsed}
