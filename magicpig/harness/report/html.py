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
from urllib.parse import unquote

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


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg")


def _parser():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _inline_images(body: str, folder: Path) -> str:
    """``<img src="x.png" alt="a">`` with an image file ``folder/x.png`` -> the same tag with the file as a data
    URI. Only an image file (``IMAGE_SUFFIXES``) whose resolved path lies inside the resolved ``folder`` is read:
    any other link (an absolute path, ``../``, a symbolic link out of the folder, a URL, a data: URI, a missing
    file) becomes text, so neither a file of the machine nor a remote address reaches the page through a link
    that report text (a preset name, a skip reason, a method name) may carry."""
    root = folder.resolve()

    def repl(match: re.Match) -> str:
        src, rest, alt = html.unescape(match.group(1)), match.group(2), html.unescape(match.group(3) or "")
        path = _local_image(root, unquote(src))  # the parser percent-encodes links: fig%20a.png
        if path is None:
            return (f'<span class="not-embedded">[image {html.escape(alt)}: {html.escape(src)} '
                    "(not embedded: only image files of the report's folder are)]</span>")
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f'<img src="data:{mime};base64,{data}"{rest}'

    return re.sub(r'<img src="([^"]*)"((?: alt="([^"]*)")?[^>]*>)', repl, body)


def _local_image(root: Path, src: str) -> Path | None:
    """The image file ``src`` names inside ``root`` (resolved), or None."""
    if not src or "://" in src or ":" in src.split("/", 1)[0] or src.startswith(("/", "\\")):
        return None  # a URL, a data: URI, a drive letter or an absolute path
    try:
        path = (root / src).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    return path if path.is_relative_to(root) and path.suffix.lower() in IMAGE_SUFFIXES and path.is_file() else None


# a collapsed block of the Markdown: a paragraph that is exactly `<details><summary>TEXT</summary>` opens it, one
# that is exactly `</details>` closes it. Raw HTML is off, so the parser emits both escaped; only these two whole
# paragraphs become live tags (TEXT stays as the parser escaped it), anything else (a tag inside a table cell or
# a sentence) stays text.
_CLOSE = "<p>&lt;/details&gt;</p>"
_BLOCK = re.compile(r"^<p>&lt;details&gt;&lt;summary&gt;(.*?)&lt;/summary&gt;</p>$|^<p>&lt;/details&gt;</p>$",
                    re.M)


def collapsible(body: str) -> str:
    """``body`` (the parser's HTML) with the collapsed blocks of the Markdown as ``<details>`` elements (see
    ``_BLOCK``); a closing paragraph without an open block stays text, a block left open is closed at the end."""
    depth = 0

    def repl(match: re.Match) -> str:
        nonlocal depth
        if match.group(0) == _CLOSE:
            if not depth:
                return match.group(0)
            depth -= 1
            return "</details>"
        depth += 1
        return f"<details><summary>{match.group(1)}</summary>"

    out = _BLOCK.sub(repl, body)
    return out + "</details>\n" * depth


def render_html(markdown_text: str, folder: Path | str, title: str = "MagicPIG reproduction report") -> str:
    """The HTML page of ``markdown_text`` (CommonMark + pipe tables), images under ``folder`` embedded, collapsed
    blocks (``collapsible``) open and closed by their tags."""
    body = collapsible(_inline_images(_parser().render(markdown_text), Path(folder)))
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}'
            f"</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n")


def write_html(markdown_path: Path | str) -> Path:
    """Write ``REPORT.html`` beside ``markdown_path`` from it; returns its path."""
    markdown_path = Path(markdown_path)
    out = markdown_path.with_suffix(".html")
    out.write_text(render_html(markdown_path.read_text(encoding="utf-8"), markdown_path.parent), encoding="utf-8")
    return out
