"""Reading the CSVs the benchmarks append to (``magicpig.atomic_io.CsvAppender``): rows with their types
back, a torn row (a killed or disk-full writer) skipped with a warning naming the file and the line, an
empty file refused by name."""
from __future__ import annotations

import csv
import sys


def load_rows(path) -> list[dict]:
    """Rows of a bench-decode CSV with their types back (booleans, numbers; '' stays '')."""
    def value(text: str):
        if text in ("true", "false"):
            return text == "true"
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return text

    rows: list[dict] = []
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: empty bench-decode CSV (no header, no rows)")
        try:
            for cells in reader:
                if len(cells) == len(header):
                    rows.append({k: value(v) for k, v in zip(header, cells)})
                elif cells:  # a row torn by a killed or disk-full writer
                    print(f"warning: {path}: line {reader.line_num} skipped ({len(cells)} of {len(header)} cells)",
                          file=sys.stderr)
        except csv.Error as exc:  # a field past the csv module's size limit, a NUL byte: not one of our rows
            raise ValueError(f"{path}: line {reader.line_num} is not a CSV row of a benchmark ({exc})") from None
    return rows
