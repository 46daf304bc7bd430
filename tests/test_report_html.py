"""REPORT.html: the Markdown report rendered, so report.html shows the claims and every table (not a download)."""
import base64
import re
from html.parser import HTMLParser

from magicpig.harness.report import build_report
from magicpig.harness.report.html import render_html

from test_report import write_metrics


class Tables(HTMLParser):
    """The text of every <table> of a page, as rows of cells, and the src of every <img>."""

    def __init__(self):
        super().__init__()
        self.tables, self.images, self._cell = [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = ""
        elif tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append(self._cell.strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def tables_of(page: str) -> Tables:
    parsed = Tables()
    parsed.feed(page)
    return parsed


def test_pipe_tables_become_html_tables_and_images_are_embedded(tmp_path):
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
    (tmp_path / "fig.png").write_bytes(png)
    page = render_html("# T\n\n| a | `b` |\n|---|---|\n| 1 | 2 <3 |\n\n![a figure](fig.png)\n", tmp_path)
    parsed = tables_of(page)
    assert parsed.tables == [[["a", "b"], ["1", "2 <3"]]]
    assert parsed.images == ["data:image/png;base64," + base64.b64encode(png).decode()]
    assert "<script" not in page and "&lt;3" in page  # text is escaped, never markup


def report_fixture(tmp_path):
    acc = tmp_path / "results" / "accuracy"
    write_metrics(acc, "ruler/cwe", 4096, "dense", 61.0, 1.0)
    write_metrics(acc, "ruler/vt", 4096, "dense", 80.0, 1.0)
    write_metrics(acc, "ruler/cwe", 4096, "magicpig:K=10,L=150", 55.0, 0.021)
    write_metrics(acc, "ruler/vt", 4096, "magicpig:K=10,L=150", 79.0, 0.019)
    return build_report(tmp_path / "results", tmp_path / "fig", "test")


def check_rendered_report(page: str) -> None:
    """The claims table and the RULER table of ``report_fixture`` are HTML tables of ``page``, and its figures
    are embedded images."""
    parsed = tables_of(page)
    claims = next(t for t in parsed.tables if t[0] == ["claim", "paper", "needs", "test", "measured here", "verdict"])
    assert any(row[0] == "ruler_near_dense" and row[1].startswith("MagicPIG (10,150) stays within 2-3 points")
               for row in claims)
    assert ["dense", "70.5", "2/2", "100.0%", "94.2", "91.5", "86.1", "83"] in next(
        t for t in parsed.tables if t[0][0] == "method" and t[0][1] == "ours 4096")
    assert parsed.images and all(src.startswith("data:image/png;base64,") for src in parsed.images)


def test_report_html_holds_the_claims_and_the_tables(tmp_path):
    md = report_fixture(tmp_path)
    check_rendered_report((md.parent / "REPORT.html").read_text(encoding="utf-8"))


def embedded_html(report_html: str, name: str) -> str:
    """The text/html result ``name`` embedded in a `snakemake --report` page (a base64 data URI), decoded."""
    match = re.search(rf'"data:text/html;[^",]*filename={re.escape(name)};base64,([^"]+)"', report_html)
    assert match, f"{name} is not embedded as text/html"
    return base64.b64decode(match.group(1)).decode("utf-8")


def test_snakemake_report_shows_report_html_inline(tmp_path):
    """`snakemake --report` of a finished smoke run (a copy of the workflow, every output present, the report
    built from a fixture results tree) embeds REPORT.html as an HTML page, which it shows in place, holding the
    claims and the tables."""
    import shutil
    import subprocess

    from test_workflow import ROOT, SNAKEMAKE, _touch_results

    for name in ("Snakefile", "workflow", "config"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    _touch_results(tmp_path, "--configfile", "config/smoke.yaml")
    built = report_fixture(tmp_path / "fixture").parent
    for f in built.iterdir():
        if f.is_file():  # the report's files; its disagreements/ folder of CSVs is not an output of the rule
            shutil.copy(f, tmp_path / "figures/generated/smoke" / f.name)
    r = subprocess.run([SNAKEMAKE, "--cores", "1", "--configfile", "config/smoke.yaml", "--report", "report.html"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "filename=REPORT.md;" not in page  # the Markdown file is no longer a download of the report
    check_rendered_report(embedded_html(page, "REPORT.html"))
