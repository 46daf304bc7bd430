"""CONTRIBUTING's "Add a task" recipe, followed: a module of its own (in a temporary folder) registers a
synthetic task and a data-backed one; once imported, both are known to the registry (names, group, data
tasks), build through ``get_task`` and run through ``magicpig eval``'s runner on the tiny model, scored."""
from __future__ import annotations

import importlib.util
import json
import sys

import pytest

TOY = '''
"""Toy benchmark: recall a word hidden among filler words, or answer a question from a data file."""
from magicpig_tasks.common import Draft, Sample, SyntheticTask, register
from magicpig_tasks.records import RecordsTask
from magicpig_tasks.ruler.scoring import string_match_all


@register
class HiddenWord(SyntheticTask):
    names = ("toy/hidden_word",)
    groups = ("toy",)
    metric = "string_match_all"
    max_new_tokens = 4

    def make(self, rng, length, tokenizer):
        word = f"word{rng.randint(1000, 9999)}"
        depth = rng.random()

        def render(n):
            filler = ["filler"] * n
            filler.insert(int(depth * n), word)
            return "One word below is not filler. " + " ".join(filler), "\\nWhich word is it?", " It is"

        return Draft(render, [word], per_1k=900.0, meta={"depth": depth})

    def score(self, prediction, sample):
        return string_match_all(prediction, sample.references)


@register
class FileQuestions(RecordsTask):
    names = ("toy/file_questions",)
    groups = ("toy",)
    metric = "string_match_all"
    max_new_tokens = 4

    def check_record(self, index, record):
        if "question" not in record or "answer" not in record:
            raise ValueError(f"{self.name}: record {index} needs 'question' and 'answer'")

    def sample(self, enc, record, index, length):
        ctx, q = enc.encode("Answer briefly.\\n", record["question"])
        return Sample(id=f"{self.name}/{index}", context_ids=ctx, question_ids=q, references=[record["answer"]],
                      max_new_tokens=self.max_new_tokens)

    def score(self, prediction, sample):
        return string_match_all(prediction, sample.references)
'''


@pytest.fixture
def toy_tasks(tmp_path):
    """The toy module imported from its own folder; the registry and sys.modules are restored afterwards."""
    from magicpig_tasks.common import TASKS

    folder = tmp_path / "my_tasks"
    folder.mkdir()
    path = folder / "toy_tasks.py"
    path.write_text(TOY)
    data = folder / "questions.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} plus {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(3)))
    before = dict(TASKS)
    spec = importlib.util.spec_from_file_location("toy_tasks", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["toy_tasks"] = module
    spec.loader.exec_module(module)
    yield data
    TASKS.clear()
    TASKS.update(before)
    del sys.modules["toy_tasks"]


def test_a_registered_task_is_known_built_and_evaluated(toy_tasks, tmp_path, tiny, tokenizer):
    from magicpig.harness.evaluate import EvalConfig, run_eval
    from magicpig_tasks.registry import DATA_TASKS, GROUPS, TASK_NAMES, expand, get_task

    assert TASK_NAMES[-2:] == ("toy/hidden_word", "toy/file_questions")
    assert GROUPS["toy"] == ("toy/hidden_word", "toy/file_questions") and expand("toy") == list(GROUPS["toy"])
    assert "toy/file_questions" in DATA_TASKS and "toy/hidden_word" not in DATA_TASKS
    with pytest.raises(ValueError, match="takes no data file"):
        get_task("toy/hidden_word", str(toy_tasks))

    task = get_task("toy/hidden_word", settings={"chat_template": "none"})
    samples = task.build(tokenizer, 256, 2, seed=1)
    assert [s.id for s in samples] == ["toy/hidden_word/256/1/0", "toy/hidden_word/256/1/1"]
    assert all(0.95 * 256 <= s.n_tokens <= 256 for s in samples)  # sized to the target like RULER's
    assert all(s.references[0] in tokenizer.decode(s.context_ids) for s in samples)
    assert task.score(f" It is {samples[0].references[0]}.", samples[0]) == 100.0
    assert [s.prompt_ids for s in get_task("toy/hidden_word", settings={"chat_template": "none"})
            .build(tokenizer, 256, 2, seed=1)] == [s.prompt_ids for s in samples]  # same seed, same prompts
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n')
    with pytest.raises(ValueError, match="record 0 needs 'question' and 'answer'"):
        get_task("toy/file_questions", str(bad)).records()

    out = tmp_path / "out"
    cfg = EvalConfig(model="tiny", methods=["dense"], tasks=["toy"], lengths=[256], samples=2, out=out,
                     data={"toy/file_questions": str(toy_tasks)}, max_new_tokens=3, progress=False)
    metrics = run_eval(cfg, model=tiny, tokenizer=tokenizer, log=lambda msg: None)
    assert [(m["task"], m["status"]) for m in metrics] == [("toy/hidden_word", "ok"), ("toy/file_questions", "ok")]
    for m in metrics:
        folder = out / m["task"] / "256" / "dense"
        rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
        built = {s.id: s for s in get_task(m["task"], cfg.data.get(m["task"])).build(tokenizer, 256, 2)}
        assert [r["id"] for r in rows] == list(built) and m["counts"]["scored"] == 2
        for r in rows:  # each row scored by the task's own scorer, the aggregate their mean
            assert r["score"] in (0.0, 100.0) and r["references"] == built[r["id"]].references
            assert r["score"] == get_task(m["task"]).score(r["prediction"], built[r["id"]])
        assert m["score"] == pytest.approx(sum(r["score"] for r in rows) / 2)
        assert m["task_settings"]["task"] == m["task"] and m["metric"] == "string_match_all"
        assert json.loads((folder / "metrics.json").read_text())["score"] == m["score"]
