"""Reference runs (``magicpig archive``, ``magicpig.harness.reference_runs``) and the doctor's job-time
estimate from one on a fresh clone: the folder is written once and whole, read back as untrusted input, and
the estimate says whether the reference's preset config equals the one about to run."""
from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

import pytest

from magicpig.harness import doctor, reference_runs
from magicpig.harness.cli import main
from test_doctor import write_config


def finished_run(tmp_path: Path) -> tuple[Path, Path]:
    """A results folder with two benchmark files (0.5 h + 1.5 h) and a report folder with its files."""
    bench = tmp_path / "results" / "benchmarks" / "eval_ruler"
    bench.mkdir(parents=True)
    (bench / "a.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n1800\t0:30:00\t900\t1700\n")
    (bench / "b.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n5400\t1:30:00\t900\t5000\n")
    report = tmp_path / "report"
    report.mkdir()
    (report / "REPORT.md").write_text("# report\n")
    (report / "REPORT.html").write_text("<html></html>\n")
    (report / "fig.png").write_bytes(b"\x89PNG")
    (report / "notes.txt").write_text("not a report file\n")
    pair = report / "disagreements" / "magicpig__vs__dense"
    pair.mkdir(parents=True)
    (pair / "ruler__fwe_4096.csv").write_text("id,score_a,score_b\nx,100,0\n")
    (pair / "notes.txt").write_text("not a CSV\n")
    (pair / "link.csv").symlink_to(report / "notes.txt")
    return tmp_path / "results", report


def test_archive_writes_the_report_job_times_machine_and_config_once(tmp_path):
    results, report = finished_run(tmp_path)
    out = reference_runs.archive("cpu", {"model": "smollm2"}, results, report, root=tmp_path / "ref",
                                 date="2026-12-04", commit="abc")
    assert out == tmp_path / "ref" / "cpu-2026-12-04"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["REPORT.md", "REPORT.html", "disagreements", "fig.png", "job_times.csv", "machine.json", "run.json"])
    # the CSVs the report links to, and nothing else from their folder
    copied = out / "disagreements" / "magicpig__vs__dense"
    assert [p.name for p in copied.iterdir()] == ["ruler__fwe_4096.csv"]
    assert (copied / "ruler__fwe_4096.csv").read_text() == "id,score_a,score_b\nx,100,0\n"
    run = json.loads((out / "run.json").read_text())
    assert run["job_hours"] == 2.0 and run["jobs"] == 2 and run["commit"] == "abc"
    assert run["config_sha256"] == reference_runs.config_digest({"model": "smollm2"})
    ref = reference_runs.read(out)
    assert (ref.preset, ref.job_seconds, ref.jobs) == ("cpu", 7200.0, 2)
    with pytest.raises(FileExistsError, match="never overwritten"):
        reference_runs.archive("cpu", {}, results, report, root=tmp_path / "ref", date="2026-12-04")


def test_archive_refuses_bad_names_dates_and_a_missing_report(tmp_path):
    results, report = finished_run(tmp_path)
    with pytest.raises(ValueError, match="preset"):
        reference_runs.archive("../x", {}, results, report, root=tmp_path, date="2026-12-04")
    with pytest.raises(ValueError, match="date"):
        reference_runs.archive("cpu", {}, results, report, root=tmp_path, date="2026-13-04")
    with pytest.raises(FileNotFoundError, match="REPORT.html"):
        (report / "REPORT.html").unlink()
        reference_runs.archive("cpu", {}, results, report, root=tmp_path, date="2026-12-04")
    assert not (tmp_path / "cpu-2026-12-04").exists()


def test_latest_picks_the_newest_dated_folder_of_the_preset_only(tmp_path):
    for name in ("cpu-2026-01-02", "cpu-2026-11-30", "cpu-long-2026-12-31", "cpu-notadate", "cpu-2026-12-01.partial"):
        (tmp_path / name).mkdir()
    assert reference_runs.latest("cpu", tmp_path).name == "cpu-2026-11-30"
    assert reference_runs.latest("smoke", tmp_path) is None
    assert reference_runs.latest("cpu", tmp_path / "absent") is None


def test_a_malformed_reference_is_refused_naming_the_file(tmp_path):
    results, report = finished_run(tmp_path)
    out = reference_runs.archive("cpu", {}, results, report, root=tmp_path / "ref", date="2026-12-04")
    (out / "job_times.csv").write_text("rule,job,seconds\neval,a,nan\n")
    with pytest.raises(ValueError, match="job_times.csv.*finite"):
        reference_runs.read(out)
    (out / "job_times.csv").write_text("rule,job,seconds\neval,a,10\n")
    (out / "run.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="run.json.*not an object"):
        reference_runs.read(out)


def test_doctor_estimates_a_fresh_clone_s_job_time_from_the_reference_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MAGICPIG_OFFLINE", "1")
    monkeypatch.setenv("MAGICPIG_DATA", str(tmp_path / "cache"))
    results, report = finished_run(tmp_path)
    config = write_config(tmp_path)
    preset, name, _ = doctor.load_config(config, None, lambda _w: None)
    reference_runs.archive(name, preset, results, report, root=tmp_path / "ref", date="2026-12-04")

    def time_finding(path):
        _, findings, _ = doctor.diagnose(path, None, build=False, results=tmp_path / "fresh",
                                         reference_root=tmp_path / "ref")
        (t,) = [f for f in findings if f.area == "time"]
        return t

    same = time_finding(config)
    assert same.status == doctor.OK and same.detail.startswith("about 2.00 h over 2 jobs")
    assert "its preset config equals this one" in same.detail
    (tmp_path / "other").mkdir()
    changed = time_finding(write_config(tmp_path / "other", edit=lambda p: p["ruler"].update(samples=5)))
    assert changed.status == doctor.WARN and "differs from this one" in changed.detail
    (tmp_path / "ref" / "cpu-2026-12-04" / "job_times.csv").write_text("nonsense")
    assert "unreadable" in time_finding(config).detail


def test_archive_command_copies_a_preset_s_report(tmp_path, monkeypatch, capsys):
    results, report = finished_run(tmp_path)
    config = write_config(tmp_path)
    assert main(["archive", "--config", str(config), "--results", str(results), "--report", str(report),
                 "--out", str(tmp_path / "ref"), "--date", "2026-12-04", "--commit", "c0ffee"]) == 0
    assert "cpu-2026-12-04" in capsys.readouterr().out
    assert json.loads((tmp_path / "ref" / "cpu-2026-12-04" / "run.json").read_text())["commit"] == "c0ffee"


@pytest.mark.parametrize("preset", ["cpu", "cpu-long"])
def test_the_committed_reference_report_s_links_resolve(preset):
    """The README sends readers to the newest reference run of each CPU preset: every relative link of its
    REPORT.md (figures, disagreement CSVs) names a file that is in the folder."""
    folder = reference_runs.latest(preset, Path(__file__).resolve().parents[1] / reference_runs.ROOT)
    assert folder is not None, f"no committed reference run of {preset}"
    text = (folder / "REPORT.md").read_text(encoding="utf-8")
    links = {urllib.parse.unquote(t) for t in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", text)}
    assert any(t.endswith(".csv") for t in links) and any(t.endswith(".png") for t in links)
    assert sorted(t for t in links if not (folder / t).is_file()) == []
