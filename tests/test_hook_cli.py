"""`magicpig generate` argument errors are reported before any model is loaded."""
import time

from magicpig.harness.cli import main


def test_bad_method_spec_fails_fast(tmp_path, capsys):
    f = tmp_path / "p.txt"
    f.write_text("hi")
    t0 = time.perf_counter()
    assert main(["generate", "--method", "magicpig:K=99", "--prompt-file", str(f)]) == 2
    assert "K" in capsys.readouterr().err and time.perf_counter() - t0 < 10


def test_missing_prompt_file(tmp_path, capsys):
    assert main(["generate", "--prompt-file", str(tmp_path / "missing.txt")]) == 2
    assert "--prompt-file" in capsys.readouterr().err


def test_bench_decode_rejects_bad_backend(capsys):
    assert main(["bench", "decode", "--method", "dense@gpu"]) == 2
    assert "backend" in capsys.readouterr().err
