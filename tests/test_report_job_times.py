"""The report's job-time section sums Snakemake's benchmark files per rule."""
import pytest

from magicpig.harness.report.build import job_time_section
from magicpig.harness.results_tree import read_job_times

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def write_benchmark(path, seconds, rss_mb, cpu):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{seconds}\t0:00:00\t{rss_mb}\t1\t1\t1\t0\t0\t100\t{cpu}\n")


def test_jobs_are_summed_per_rule_and_the_total_is_their_sum(tmp_path):
    bench = tmp_path / "benchmarks"
    write_benchmark(bench / "eval_ruler" / "eval_ruler_cwe_4096.tsv", 600, 2048, 1100)
    write_benchmark(bench / "eval_ruler" / "eval_ruler_fwe_4096.tsv", 1200, 3072, 2300)
    write_benchmark(bench / "tune_kl" / "tune_kl.tsv", 60, 512, 100)
    write_benchmark(bench / "report.tsv", 30, 256, 20)  # a flat file is a rule of its own
    df = read_job_times(tmp_path)
    assert sorted(df["rule"].unique()) == ["eval_ruler", "report", "tune_kl"]
    text = "\n".join(job_time_section(tmp_path))
    assert "| `eval_ruler` | 2 | 30 | 20 | 56.7 | 3.00 |" in text
    assert "| **all** | 4 | **31.5** | 20 | 58.7 | 3.00 |" in text
    assert "0.53 h in all" in text
    # the longest rule comes first
    assert text.index("`eval_ruler`") < text.index("`tune_kl`") < text.index("`report`")


def test_no_files_says_so_and_a_foreign_file_is_named(tmp_path):
    assert "No benchmark files" in "\n".join(job_time_section(tmp_path))
    bad = tmp_path / "benchmarks" / "eval_ruler" / "x.tsv"
    bad.parent.mkdir(parents=True)
    bad.write_text("a\tb\n1\t2\n")
    with pytest.raises(ValueError, match="x.tsv: not a Snakemake benchmark file"):
        read_job_times(tmp_path)
