"""ROLL's GEM question envs on local files (envs/question_envs.py): a right answer scores 1,
a wrong one 0, an unparseable one 0 and invalid; a seed picks the question; the shipped data
(examples/data/gem_local_data.py) is what its generator writes, and answers itself."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from flywheel.envs import QuestionEnv, make

DATA = Path(__file__).parents[2] / "examples" / "data"


def write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_math_answer_is_the_last_boxed_one_checked_by_math_verify(tmp_path):
    path = write(tmp_path / "m.jsonl", [{"question": "Half of one?", "answer": "\\frac{1}{2}"}])
    env = make("roll_math", data_file=path)
    assert isinstance(env, QuestionEnv) and env.reset(seed=3)[0] == "Half of one?"
    for reply, reward, valid in [("\\boxed{3} no, \\boxed{0.5}", 1.0, True),
                                 ("so \\boxed{\\dfrac{2}{4}}", 1.0, True),
                                 ("\\boxed{1/3}", 0.0, True), ("0.5", 0.0, False)]:
        env.reset(seed=3)
        observation, got, terminated, _, info = env.step(reply)
        assert (got, info["action_is_valid"], info["success"]) == (reward, valid, reward == 1)
        assert terminated  # one reply per episode, as ROLL's
    with pytest.raises(RuntimeError, match="reset"):
        env.step("\\boxed{0.5}")


def test_qa_answer_is_exact_match_after_normalisation(tmp_path):
    path = write(tmp_path / "q.jsonl", [{"question": "Capital of France?",
                                         "answer": ["Paris", "Paris, France"]}])
    env = make("roll_qa", data_file=path)
    observation, _ = env.reset(seed=0)
    assert observation.endswith("Question: Capital of France?") and "<answer>" in observation
    for reply, reward, valid in [("<think>hm</think><answer> the PARIS. </answer>", 1.0, True),
                                 ("<answer>Lyon</answer><answer>paris, france</answer>", 1.0,
                                  True),
                                 ("<answer>Paris is nice</answer>", 0.0, True),
                                 ("\\boxed{Paris}", 0.0, False)]:
        env.reset(seed=0)
        _, got, _, _, info = env.step(reply)
        assert (got, info["action_is_valid"]) == (reward, valid)
    boxed = make("roll_qa", data_file=path, extract_boxed=True)
    boxed.reset(seed=0)
    assert boxed.step("\\boxed{Paris}")[1] == 1.0


def test_a_seed_picks_the_question_and_bad_files_name_the_line(tmp_path):
    env = make("roll_math", data_file=str(DATA / "gem_math.jsonl"))
    firsts = [env.reset(seed=s)[0] for s in (1, 2, 1)]
    assert firsts[0] == firsts[2] != firsts[1]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "1"}\n{"problem": "q"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: expected a JSON object with 'question'"):
        make("roll_math", data_file=str(bad))
    with pytest.raises(ValueError, match="data_file none.jsonl: No such file"):
        make("roll_math", data_file="none.jsonl")
    with pytest.raises(TypeError, match="unknown env_config key 'dataset_name'"):
        make("roll_qa", data_file=str(bad), dataset_name="axon-rl/HotpotQA")


def test_shipped_data_is_the_generators_and_answers_itself(tmp_path):
    spec = importlib.util.spec_from_file_location("gem_local_data", DATA / "gem_local_data.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generator.main(tmp_path)
    for name in ("gem_math.jsonl", "gem_qa.jsonl", "gem_qa_documents.jsonl"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name
    math = make("roll_math", data_file=str(DATA / "gem_math.jsonl"))
    qa = make("roll_qa", data_file=str(DATA / "gem_qa.jsonl"))
    assert len(math.items) == len(qa.items) == 300
    for env, answer in ((math, "\\boxed{{{}}}"), (qa, "<answer>{}</answer>")):
        for seed in range(12):
            env.reset(seed=seed)
            assert env.step(answer.format(env.item[1]))[1] == 1.0, env.item
    documents = (DATA / "gem_qa_documents.jsonl").read_text()
    assert all(str(answer) in documents for _, answer in qa.items)  # found by searching
