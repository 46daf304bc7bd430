"""The task settings reach the tasks: ``magicpig eval --chat-template`` / ``--gsm8k-add-bos`` ->
EvalConfig.task_settings -> get_task -> the task's describe() (settings.json and metrics.json record it)."""
from __future__ import annotations

import pytest

import magicpig.harness.evaluate as evaluate
from magicpig.harness.cli import build_parser
from magicpig.harness.evaluate import EvalConfig


def _cfg_from_cli(monkeypatch, tmp_path, *extra):
    seen = {}

    def fake_run_eval(cfg):
        seen["cfg"] = cfg
        return []

    monkeypatch.setattr(evaluate, "run_eval", fake_run_eval)
    args = build_parser().parse_args(["eval", "--method", "dense", "--task", "ruler/vt,gsm8k", "--length", "1k",
                                      "--out", str(tmp_path), *extra])
    assert args.func(args) == 0
    return seen["cfg"]


def test_cli_defaults_keep_todays_template_and_paper_era_bos(monkeypatch, tmp_path):
    cfg = _cfg_from_cli(monkeypatch, tmp_path)
    assert cfg.task_settings == {"chat_template": "tokenizer", "gsm8k_add_bos": False}


def test_cli_options_reach_the_tasks(monkeypatch, tmp_path):
    cfg = _cfg_from_cli(monkeypatch, tmp_path, "--chat-template", "meta-chat-3", "--gsm8k-add-bos")
    assert cfg.task_settings == {"chat_template": "meta-chat-3", "gsm8k_add_bos": True}
    assert evaluate._get_task(cfg, "ruler/vt").describe()["chat_template"] == "meta-chat-3"
    assert evaluate._get_task(cfg, "longbench/qasper").describe()["chat_template"] == "meta-chat-3"
    assert evaluate._get_task(cfg, "gsm8k").describe()["add_bos"] is True


def test_config_rejects_unknown_template(tmp_path):
    cfg = EvalConfig(model="smollm2", methods=["dense"], tasks=["ruler/vt"], lengths=[1024], samples=1, out=tmp_path,
                     task_settings={"chat_template": "llama3"})
    with pytest.raises(ValueError, match="chat_template must be one of tokenizer, meta-chat-3, none"):
        cfg.check()


def test_settings_and_metrics_record_the_task_settings(tmp_path):
    from magicpig.methods import parse_method

    cfg = EvalConfig(model="smollm2", methods=["dense"], tasks=["gsm8k"], lengths=[1024], samples=1, out=tmp_path,
                     task_settings={"gsm8k_add_bos": True})
    cfg.check()
    task = evaluate._get_task(cfg, "gsm8k")
    method = parse_method("dense")
    assert evaluate.run_settings(cfg, "gsm8k", task, 1024, method)["task"]["add_bos"] is True
    m = evaluate._metrics_skeleton(cfg, task, 1024, "dense", method, {})
    assert m["task_settings"]["add_bos"] is True and m["task_settings"]["chat_template"] == "none"


def test_magicpig_tasks_lists_the_settings(capsys):
    import json

    from magicpig.harness.cli import main

    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "setting chat_template (magicpig eval --chat-template, default tokenizer; one of" in out
    assert "tokenizer, meta-chat-3, none" in out and "--gsm8k-add-bos" in out
    assert main(["tasks", "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert settings["gsm8k_add_bos"]["default"] is False and settings["chat_template"]["option"] == "--chat-template"
    assert settings["chat_template"]["choices"] == ["tokenizer", "meta-chat-3", "none"]


def test_config_rejects_unknown_setting(tmp_path):
    cfg = EvalConfig(model="smollm2", methods=["dense"], tasks=["ruler/vt"], lengths=[1024], samples=1, out=tmp_path,
                     task_settings={"add_bos": True})
    with pytest.raises(ValueError, match="task settings: unknown 'add_bos'"):
        cfg.check()
