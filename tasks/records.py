"""The data-backed tasks: ``RecordsTask`` (one sample per record of a dataset), ``LmEvalTask`` (its
lm-evaluation-harness flavour), and reading records (dicts) from local files, or from remote files fetched
into the local cache by ``magicpig_tasks.download.fetch``."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from magicpig_tasks.common import Sample, Task, check_build_args, record_order
from magicpig_tasks.encoding import PromptEncoder


class RecordsTask(Task):
    """A task whose samples come from a dataset's records: a local file (``data_path``; ``magicpig eval
    --data TASK=PATH``) or the file at ``source_url``, read and checked once (``records``). Sample j is
    record j of ``record_order`` (file order for seed 0), prompted by ``sample``.

    A prompt longer than ``length`` is refused, naming the record, unless the task ``truncates`` it itself
    (LongBench). ``one_sample_per_record``: a run may ask for at most as many samples as there are records
    (RULER QA asks a question again with a new haystack instead).
    """

    source_url: ClassVar[str] = ""
    truncates: ClassVar[bool] = False
    one_sample_per_record: ClassVar[bool] = True

    def __init__(self, name: str | None = None, settings: dict[str, Any] | None = None,
                 data_path: str | None = None):
        super().__init__(name, settings)
        self.data_path = data_path
        self._records: list | None = None

    def records(self) -> list:
        """The task's records, read and checked on first use."""
        if self._records is None:
            self._records = self.load()
        return self._records

    def load(self) -> list[dict[str, Any]]:
        """Read the records (``data_path``, else ``source_url``) and check each (``check_record``)."""
        rows = (read_records(self.data_path, self.name) if self.data_path
                else read_remote_records(self.source_url, self.name))
        for i, row in enumerate(rows):
            try:
                self.check_record(i, row)
            except ValueError as exc:
                where = str(self.data_path or self.source_url)
                if where in str(exc):
                    raise
                raise ValueError(f"{exc} (in {where})") from None
        return rows

    def check_record(self, index: int, record: dict[str, Any]) -> None:
        """Raise ValueError naming the task, the record and the field when ``record`` cannot be prompted."""

    def sample(self, enc: PromptEncoder, record: dict[str, Any], index: int, length: int) -> Sample:
        """The sample of record ``index``."""
        raise NotImplementedError

    def build(self, tokenizer, length: int, count: int, seed: int = 0) -> list[Sample]:
        check_build_args(self.name, length, count)
        rows = self.records()
        enc = self.encoder(tokenizer)
        out = []
        for j in record_order(len(rows), seed)[:count]:
            sample = self.sample(enc, rows[j], j, length)
            if not self.truncates and sample.n_tokens > length:
                raise ValueError(f"{self.name}: prompt of record {j} has {sample.n_tokens} tokens > length {length}")
            out.append(sample)
        return out


class LmEvalTask(RecordsTask):
    """A data-backed task of the paper's Table 1, run as lm-evaluation-harness 0.4 runs it: a plain prompt (no
    chat template), no BOS token (GSM8K: unless its ``gsm8k_add_bos`` setting asks for one), a 256-token
    answer and MagicPIG's 24-token local window."""

    groups = ("lm_eval",)
    max_new_tokens: ClassVar[int] = 256
    method_overrides = {"magicpig": {"local": 24}}

    def configure(self, settings: dict[str, Any]) -> None:
        self.chat_template, self.add_bos = "none", False

    def encoder(self, tokenizer) -> PromptEncoder:
        return PromptEncoder(tokenizer, self.chat_template, add_bos=self.add_bos)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "add_bos": self.add_bos}


def read_records(path: str | Path, what: str) -> list[dict[str, Any]]:
    """Records from a ``.jsonl``, ``.json`` (a list, or {"data": [...]}) or ``.parquet`` file.

    Raises ValueError naming the file (and for JSONL the line, counted from 1 over every line, blank ones
    included) for a file that is not UTF-8, not valid JSON / parquet, holds something other than
    objects, or holds no record at all (an empty file would otherwise score 0 on 0 samples)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what}: data file {p} does not exist")
    if p.suffix == ".jsonl":
        rows = _jsonl_rows(p, what)
    elif p.suffix == ".json":
        try:
            data = json.loads(_utf8(p, what))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{what}: data file {p} is not valid JSON: {exc}") from None
        except RecursionError:
            raise ValueError(f"{what}: data file {p} nests its JSON too deeply") from None
        rows = data.get("data", data) if isinstance(data, dict) else data
    elif p.suffix == ".parquet":
        import pandas as pd
        try:
            rows = pd.read_parquet(p).to_dict("records")
        except Exception as exc:  # pyarrow raises its own error types for a corrupt file
            raise ValueError(f"{what}: data file {p} is not a readable parquet file: {exc}") from None
    else:
        raise ValueError(f"{what}: data file {p} must be .jsonl, .json or .parquet")
    if not isinstance(rows, list):
        raise ValueError(f"{what}: {p} does not hold a list of records")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise ValueError(f"{what}: {p}: record {i} is a {type(r).__name__}, not an object")
    if not rows:
        raise ValueError(f"{what}: data file {p} holds no records")
    return [plain(r) for r in rows]


def _utf8(p: Path, what: str) -> str:
    data = p.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ValueError(f"{what}: data file {p} is not UTF-8 (line {line}, byte {exc.start})") from None


def _jsonl_rows(p: Path, what: str) -> list:
    rows = []
    for number, line in enumerate(_utf8(p, what).split("\n"), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{what}: data file {p} line {number}: not valid JSON ({exc.msg}, "
                                 f"column {exc.colno})") from None
            except RecursionError:
                raise ValueError(f"{what}: data file {p} line {number}: its JSON nests too deeply") from None
            if not isinstance(rows[-1], dict):
                raise ValueError(f"{what}: data file {p} line {number}: a JSON {type(rows[-1]).__name__}, "
                                 "not an object")
    return rows


def read_remote_records(url: str, what: str) -> list[dict[str, Any]]:
    """Records of a remote ``.jsonl`` / ``.json`` / ``.parquet`` file (https URL), through the one fetcher
    (``magicpig_tasks.download``: cached, offline-aware); ``TaskUnavailable`` with the reason when it cannot
    be had."""
    from magicpig_tasks.download import fetch

    return read_records(fetch(url, None, what), what)


def plain(value: Any) -> Any:
    """numpy arrays / scalars inside a record -> python lists / scalars (JSON-serialisable)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if hasattr(value, "tolist"):
        return plain(value.tolist())
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
