"""`magicpig generate` argument errors are reported before any model is loaded."""
import magicpig.models as models
from magicpig.harness.cli import main


def test_bad_method_spec_fails_fast(tmp_path, capsys, monkeypatch):
    """The spec is refused before the model loads (a load fails the test: no clock to outrun)."""
    def no_load(*a, **k):
        raise AssertionError("the model was loaded before the method spec was checked")

    monkeypatch.setattr(models, "load_model", no_load)
    f = tmp_path / "p.txt"
    f.write_text("hi")
    assert main(["generate", "--method", "magicpig:K=99", "--prompt-file", str(f)]) == 2
    assert "K" in capsys.readouterr().err


def test_missing_prompt_file(tmp_path, capsys):
    assert main(["generate", "--prompt-file", str(tmp_path / "missing.txt")]) == 2
    assert "--prompt-file" in capsys.readouterr().err


def test_bench_decode_rejects_bad_backend(capsys):
    assert main(["bench", "decode", "--method", "dense@gpu"]) == 2
    assert "backend" in capsys.readouterr().err
