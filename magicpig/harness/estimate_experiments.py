"""The attention-level experiments of ``magicpig estimate``, one frozen declaration each: its name (the
subcommand), the options it reads, the result files it writes (its table, its summary, and extra tables) and
its function. The command's subcommands, their options and its run loop read this registry; the experiments
themselves are ``magicpig_tasks.experiments.experiments`` (per layer) and ``.token_level`` (per key / token:
Figs. 2a, 5c, 10, 11)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from magicpig.harness.result_files import (CENTERING_CSV, CENTERING_SUMMARY_CSV, ERROR_CSV, ERROR_SUMMARY_CSV,
                                           ERROR_TOPK_VS_ORACLE_CSV, ERROR_TOPK_VS_ORACLE_HEADS_CSV, GEOMETRY_CSV,
                                           GEOMETRY_HIST_CSV, GEOMETRY_SUMMARY_CSV, KL_GRID_CSV,
                                           KL_GRID_SUMMARY_CSV, MASS_CURVE_CSV, MASS_CURVE_SUMMARY_CSV,
                                           SINK_CENTER_CSV, SINK_CENTER_SUMMARY_CSV, SPREAD_CSV, SPREAD_SUMMARY_CSV,
                                           VALUE_NORM_CSV, VALUE_NORM_SUMMARY_CSV, VALUE_OUTPUT_CSV,
                                           VALUE_OUTPUT_SUMMARY_CSV, ResultFile)

# the option groups an experiment may read beyond the ones every experiment takes (layers, queries, seed,
# sinks, local): TopK / oracle budgets, MagicPIG (K, L) settings, the (K, L) grid, the long-tail heads' cut
OPTION_GROUPS = ("budgets", "kl", "grid", "heads")


@dataclass(frozen=True)
class Settings:
    """The options of one ``magicpig estimate`` run, checked and parsed; a group the experiments run do not
    read is None."""

    layers: str | None  # a layer spec; None: each experiment's default (``Experiment.heavy``)
    max_queries: int | None  # None: all queries, or the heavy experiments' share
    seed: int
    sinks: int
    local: int
    budgets: tuple[float, ...] | None = None
    kl: tuple[tuple[int, int], ...] | None = None
    Ks: tuple[int, ...] | None = None
    Ls: tuple[int, ...] | None = None
    top_frac: float | None = None
    sink_tokens: int | None = None


# an experiment's function: (capture, settings, its layers and queries as keyword arguments, the tables the
# experiments before it wrote on this capture) -> the tables it writes, its own first
Run = Callable[[object, Settings, dict, dict], dict]


@dataclass(frozen=True)
class Experiment:
    """One experiment: ``name`` (its subcommand), ``reads`` (its ``OPTION_GROUPS``), ``table`` and
    ``summary`` (``<stem>.csv`` and ``<stem>_summary.csv``), ``extras`` (its further tables), ``run`` and
    ``summarize`` (its table -> its summary). ``heavy``: the costly ones, run on every third layer and a few
    queries unless --layers / --max-queries say otherwise."""

    name: str
    reads: tuple[str, ...]
    table: ResultFile
    summary: ResultFile
    run: Run
    summarize: Callable
    extras: tuple[ResultFile, ...] = ()
    heavy: bool = False

    def __post_init__(self):
        unknown = set(self.reads) - set(OPTION_GROUPS)
        if unknown:
            raise ValueError(f"experiment {self.name!r} reads {sorted(unknown)}: not one of {OPTION_GROUPS}")

    @property
    def writes(self) -> tuple[ResultFile, ...]:
        return (self.table, self.summary, *self.extras)


def _spread(cap, s: Settings, kw: dict, earlier: dict) -> dict:
    from magicpig_tasks.experiments import experiments as E

    return {SPREAD_CSV: E.spread(cap, top_frac=s.top_frac, sink_tokens=s.sink_tokens, **kw)}


def _error(cap, s: Settings, kw: dict, earlier: dict) -> dict:
    """The error table, TopK vs oracle over it, and per head (which heads are long-tailed: the spread table
    of this capture when ``estimate all`` wrote one, else a spread run with this experiment's layers)."""
    from magicpig_tasks.experiments import experiments as E

    df = E.error(cap, budgets=s.budgets, kl=s.kl, seed=s.seed, sinks=s.sinks, local=s.local, **kw)
    spread_df = earlier.get(SPREAD_CSV)
    if spread_df is None:
        spread_df = E.spread(cap, top_frac=s.top_frac, sink_tokens=s.sink_tokens, **kw)
    return {ERROR_CSV: df, ERROR_TOPK_VS_ORACLE_CSV: E.topk_vs_oracle(df),
            ERROR_TOPK_VS_ORACLE_HEADS_CSV: E.topk_vs_oracle_heads(df, spread_df)}


def _kl_grid(cap, s: Settings, kw: dict, earlier: dict) -> dict:
    from magicpig_tasks.experiments import experiments as E

    return {KL_GRID_CSV: E.kl_grid(cap, Ks=s.Ks, Ls=s.Ls, seed=s.seed, sinks=s.sinks, local=s.local, **kw)}


def _centering(cap, s: Settings, kw: dict, earlier: dict) -> dict:
    from magicpig_tasks.experiments import experiments as E

    return {CENTERING_CSV: E.centering(cap, kl=s.kl, seed=s.seed, sinks=s.sinks, local=s.local, **kw)}


def _geometry(cap, s: Settings, kw: dict, earlier: dict) -> dict:
    """The per-(layer, head) cosines and their per-key distributions (Fig. 5)."""
    from magicpig_tasks.experiments import experiments as E

    return {GEOMETRY_CSV: E.geometry(cap, sinks=s.sinks, local=s.local, **kw),
            GEOMETRY_HIST_CSV: E.geometry_hist(cap, sinks=s.sinks, local=s.local, **kw)}


def _token_level(name: str, table: ResultFile) -> Run:
    def run(cap, s: Settings, kw: dict, earlier: dict) -> dict:
        from magicpig_tasks.experiments import token_level as T

        return {table: T.run(name, cap, **kw)}
    return run


def _summary_of(name: str, token_level: bool = False) -> Callable:
    """The summary of experiment ``name``'s table, by the module that defines the experiment."""
    def summarize(df):
        if token_level:
            from magicpig_tasks.experiments import token_level as T

            return T.summary(name, df)
        from magicpig_tasks.experiments import experiments as E

        return E.summary(name, df)
    return summarize


def _token_experiment(name: str, table: ResultFile, summary: ResultFile) -> Experiment:
    return Experiment(name, (), table, summary, _token_level(name, table), _summary_of(name, token_level=True))


EXPERIMENTS = (
    Experiment("spread", ("heads",), SPREAD_CSV, SPREAD_SUMMARY_CSV, _spread, _summary_of("spread")),
    Experiment("error", ("budgets", "kl", "heads"), ERROR_CSV, ERROR_SUMMARY_CSV, _error, _summary_of("error"),
               extras=(ERROR_TOPK_VS_ORACLE_CSV, ERROR_TOPK_VS_ORACLE_HEADS_CSV), heavy=True),
    Experiment("kl-grid", ("grid",), KL_GRID_CSV, KL_GRID_SUMMARY_CSV, _kl_grid, _summary_of("kl-grid"),
               heavy=True),
    Experiment("centering", ("kl",), CENTERING_CSV, CENTERING_SUMMARY_CSV, _centering, _summary_of("centering"),
               heavy=True),
    Experiment("geometry", (), GEOMETRY_CSV, GEOMETRY_SUMMARY_CSV, _geometry, _summary_of("geometry"),
               extras=(GEOMETRY_HIST_CSV,)),
    _token_experiment("mass-curve", MASS_CURVE_CSV, MASS_CURVE_SUMMARY_CSV),
    _token_experiment("sink-center", SINK_CENTER_CSV, SINK_CENTER_SUMMARY_CSV),
    _token_experiment("value-output", VALUE_OUTPUT_CSV, VALUE_OUTPUT_SUMMARY_CSV),
    _token_experiment("value-norm", VALUE_NORM_CSV, VALUE_NORM_SUMMARY_CSV),
)
NAMES = tuple(e.name for e in EXPERIMENTS)
BY_NAME = {e.name: e for e in EXPERIMENTS}
BY_TABLE = {e.table: e for e in EXPERIMENTS}  # an experiment's own table -> the experiment (its summary's source)


def selected(name: str) -> tuple[Experiment, ...]:
    """The experiments of subcommand ``name``: one, or every one for ``all``."""
    return EXPERIMENTS if name == "all" else (BY_NAME[name],)


def reads(name: str) -> set[str]:
    """The option groups of subcommand ``name`` (``all``: every experiment's)."""
    return {g for e in selected(name) for g in e.reads}
