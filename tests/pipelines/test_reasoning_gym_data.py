"""Prompts from reasoning-gym tasks (issue 25, item 5): `data_args.reasoning_gym` generates the
same records for the same seed, a resumed run's batch is the uninterrupted run's, a record
carries what its task's score_answer needs, and the config refuses what it cannot honour
(an unknown task in one line, file keys beside the block, a task's own seed). Real
reasoning-gym, no workers: seconds."""

from __future__ import annotations

import pytest

from flywheel.config.schema import DataArgs, ReasoningGymArgs, ReasoningGymTask
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.data.prompt_data import DataError, PromptOrder, load_records
from flywheel.platform.config.errors import ConfigError

ADDITION = {"min_terms": 2, "max_terms": 2, "max_digits": 1, "operators": ["+"],
            "allow_parentheses": False, "allow_negation": False}


def gym_args(seed: int = 0, size: int = 40, **tasks: ReasoningGymTask) -> DataArgs:
    tasks = tasks or {"basic_arithmetic": ReasoningGymTask(config=ADDITION)}
    return DataArgs(reasoning_gym=ReasoningGymArgs(tasks=tasks, size=size, seed=seed))


def test_the_same_seed_gives_the_same_prompts_and_another_seed_others():
    first = load_records(gym_args(seed=3), "actor_train")
    again = load_records(gym_args(seed=3), "actor_train")
    other = load_records(gym_args(seed=4), "actor_train")
    assert len(first) == 40
    assert [(r.prompt, r.answer, r.row) for r in first] == [
        (r.prompt, r.answer, r.row) for r in again]
    assert [r.prompt for r in first] != [r.prompt for r in other]


def test_a_record_holds_its_entry_and_is_tagged_by_its_task():
    record = load_records(gym_args(size=1), "actor_train")[0]
    a, b = (int(x) for x in record.prompt.removeprefix("Calculate ").rstrip(".").split(" + "))
    assert record.answer == str(a + b) and record.tag == "basic_arithmetic"
    assert record.row["question"] == record.prompt and record.row["answer"] == record.answer
    assert record.row["task"] == "basic_arithmetic" and record.row["task_config"] == ADDITION
    assert record.row["metadata"]["source_dataset"] == "basic_arithmetic"


def test_weights_mix_the_tasks():
    records = load_records(gym_args(size=200, basic_arithmetic=ReasoningGymTask(
        weight=3.0, config=ADDITION), spell_backward=ReasoningGymTask(
        weight=1.0, config={"min_word_len": 3, "max_word_len": 4})), "actor_train")
    share = sum(r.tag == "spell_backward" for r in records) / len(records)
    assert 0.15 < share < 0.35  # 1 / (3 + 1) = 0.25


def test_a_resumed_run_draws_the_batch_the_uninterrupted_run_would():
    # the checkpoint holds the next batch index; on resume the records are generated again
    before = PromptOrder(load_records(gym_args(seed=7), "actor_train"), seed=42)
    seen = [[r.id for r in before.batch(b, 16)] for b in range(6)]  # 96 > 40: two epochs
    resumed = PromptOrder(load_records(gym_args(seed=7), "actor_train"), seed=42)
    assert [[r.prompt for r in resumed.batch(b, 16)] for b in (4, 5)] == [
        [r.prompt for r in before.batch(b, 16)] for b in (4, 5)]
    assert [r.id for r in resumed.batch(5, 16)] == seen[5]


@pytest.mark.parametrize("tasks, message", [
    ({"basic_arithmetc": ReasoningGymTask()},
     "actor_train.data_args.reasoning_gym.tasks.basic_arithmetc: unknown reasoning-gym task "
     "(did you mean 'basic_arithmetic'"),
    ({"basic_arithmetic": ReasoningGymTask(config={"max_digitz": 2})},
     "actor_train.data_args.reasoning_gym.tasks.basic_arithmetic.config: reasoning-gym "
     "refuses it: "),
    ({"basic_arithmetic": ReasoningGymTask(config={"min_terms": 5, "max_terms": 2})},
     "actor_train.data_args.reasoning_gym.tasks.basic_arithmetic.config: reasoning-gym "
     "refuses it: "),
])
def test_what_reasoning_gym_refuses_is_one_line_naming_the_key(tasks, message):
    with pytest.raises(DataError) as info:
        load_records(DataArgs(reasoning_gym=ReasoningGymArgs(tasks=tasks)), "actor_train")
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def rlvr(train: dict, validation: dict | None = None, **top) -> dict:
    data = {"actor_train": {"data_args": train}, **top}
    if validation is not None:
        data |= {"validation": {"data_args": validation}, "eval_steps": 2}
    return data


GYM = {"reasoning_gym": {"tasks": {"basic_arithmetic": {"config": {"max_digits": 1}}}}}


def test_a_config_with_a_reasoning_gym_block_loads():
    cfg = load_config_dict(rlvr(GYM, {"reasoning_gym": {**GYM["reasoning_gym"], "seed": 1}},
                                rewards={"gym": {"reward_type": "reasoning_gym"}}))
    block = cfg.actor_train.data_args.reasoning_gym
    assert block.tasks["basic_arithmetic"].config == {"max_digits": 1} and block.size == 500


@pytest.mark.parametrize("data, key_path, message", [
    (rlvr({**GYM, "file_name": ["a.jsonl"]}), "actor_train.data_args.file_name",
     "prompts come from reasoning_gym"),
    (rlvr({**GYM, "answer_key": "solution"}), "actor_train.data_args.answer_key",
     "prompts come from reasoning_gym"),
    (rlvr({"reasoning_gym": {"tasks": {}}}), "actor_train.data_args.reasoning_gym.tasks",
     "names no task"),
    (rlvr({"reasoning_gym": {**GYM["reasoning_gym"], "size": 0}}),
     "actor_train.data_args.reasoning_gym.size", "must be >= 1"),
    (rlvr({"reasoning_gym": {"tasks": {"gcd": {"weight": 0}}}}),
     "actor_train.data_args.reasoning_gym.tasks.gcd.weight", "must be a finite number > 0"),
    (rlvr({"reasoning_gym": {"tasks": {"gcd": {"config": {"seed": 3}}}}}),
     "actor_train.data_args.reasoning_gym.tasks.gcd.config.seed",
     "is set for every task by actor_train.data_args.reasoning_gym.seed"),
    (rlvr(GYM, GYM), "validation.data_args.reasoning_gym",
     "generates the training prompts"),
    (rlvr(GYM, pipeline_type="sft"),
     "actor_train.data_args.reasoning_gym", "SFT trains on data files"),
])
def test_the_config_refuses_what_the_block_cannot_honour(data, key_path, message):
    with pytest.raises(ConfigError) as info:
        load_config_dict(data)
    assert info.value.key_path == key_path and message in str(info.value)
