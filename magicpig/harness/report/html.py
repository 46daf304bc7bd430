"""``REPORT.html``: the Markdown report rendered to one self-contained HTML page.

`snakemake --report` shows an HTML result inline (an iframe) but offers any other file as a download, so the
claims and every table reach report.html through this page. Figures are embedded as data URIs: the page is
shown from a data: URL, where relative image paths resolve to nothing.
"""
from __future__ import annotations

import base64
import html
import mimetypes
import re
from pathlib import Path

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 72em; padding: 0 1em; line-height: 1.45;
       color: #222; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.55em; text-align: left; vertical-align: top; }
th { background: #eee; }
tr:nth-child(even) td { background: #f8f8f8; }
code { background: #f1f1f1; padding: 0 0.2em; font-size: 0.92em; }
img { max-width: 100%; height: auto; }
"""


def _parser():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _inline_images(body: str, folder: Path) -> str:
    """``<img src="x.png">`` with a file ``folder/x.png`` -> the same tag with the file as a data URI."""

    def repl(match: re.Match) -> str:
        src = html.unescape(match.group(2))
        path = folder / src
        if "://" in src or src.startswith("data:") or not path.is_file():
            return match.group(0)
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f'{match.group(1)}data:{mime};base64,{data}{match.group(3)}'

    return re.sub(r'(<img src=")([^"]+)(")', repl, body)


def render_html(markdown_text: str, folder: Path | str, title: str = "MagicPIG reproduction report") -> str:
    """The HTML page of ``markdown_text`` (CommonMark + pipe tables), images under ``folder`` embedded."""
    body = _inline_images(_parser().render(markdown_text), Path(folder))
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}'
            f"</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n")


def write_html(markdown_path: Path | str) -> Path:
    """Write ``REPORT.html`` beside ``markdown_path`` from it; returns its path."""
    markdown_path = Path(markdown_path)
    out = markdown_path.with_suffix(".html")
    out.write_text(render_html(markdown_path.read_text(encoding="utf-8"), markdown_path.parent), encoding="utf-8")
    return out
