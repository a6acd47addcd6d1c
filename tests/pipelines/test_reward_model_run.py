"""`pipeline_type: reward_model` (pipelines/reward_model/run.py): Bradley-Terry steps order
the training pairs, the checkpoint loads through `reward_type: reward_model` as is and
scores exactly as the trainer's forward does, and a YAML run logs held-out pairwise
accuracy. Tiny model, in process, fp32.
"""

from __future__ import annotations

import json

import pytest
import torch

from flywheel.config.schema import ModelArgs, RewardConfig
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.reward_model.run import load, reward_model_strategy, save_reward_model
from flywheel.pipelines.run.launch import run
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.workers.pair_objective import BradleyTerryObjective
from flywheel.workers.rewards import reward_model
from flywheel.workers.rewards.registry import Sample
from flywheel.workers.strategies.hf_model import load_tokenizer


def write_pairs(path, n=8):
    path.write_text("".join(json.dumps({"prompt": f"{a}*3=", "chosen": str(3 * a),
                                        "rejected": str(3 * a + 1)}) + "\n"
                            for a in range(2, 2 + n)))
    return str(path)


def rm_config(tmp_path, **extra):
    return load_config_dict({
        "pipeline_type": "reward_model", "pretrain": "builtin://tiny-qwen2", "seed": 0,
        "output_dir": str(tmp_path / "run"), "sequence_length": 16, "max_steps": 4,
        "tracking": {"backends": ["jsonl"]},
        "actor_train": {"training_args": {"learning_rate": 1e-2,
                                          "per_device_train_batch_size": 4},
                        "data_args": {"file_name": write_pairs(tmp_path / "p.jsonl")}},
        **extra})


def test_the_checkpoint_scores_through_reward_model_as_the_trainer_does(tmp_path):
    cfg = rm_config(tmp_path)
    path = resolve_pretrain(cfg.pretrain)
    tokenizer = load_tokenizer(path)
    pairs = load(cfg, "actor_train", tokenizer)
    strategy = reward_model_strategy(cfg, path)
    batch = pairs.batch(list(range(4)), tokenizer.pad_token_id)
    accuracy = [strategy.train_step(batch, BradleyTerryObjective())["rm/accuracy"]
                for _ in range(6)]
    assert accuracy[-1] == 1.0 and accuracy[-1] > accuracy[0]
    with torch.no_grad():
        values = strategy.forward(batch)
    trained = (values * batch.response_mask).sum(-1)  # [8] the objective's scores
    folder = save_reward_model(tmp_path / "out", 6, strategy, tokenizer, None)
    scorer = reward_model.build(RewardConfig(
        reward_type="reward_model", model_args=ModelArgs(model_name_or_path=str(folder))))
    samples = [Sample(prompt=pairs.records[i].prompt, response=r, reference="")
               for i in range(4) for r in (pairs.records[i].chosen, pairs.records[i].rejected)]
    scored = [r.metadata["rm_raw_score"] for r in scorer.score(samples)]
    assert torch.allclose(torch.tensor(scored), trained, atol=1e-5, rtol=0)


@pytest.mark.long  # a whole `platform run` (~10 s idle); the steps' own tests above stay
def test_a_yaml_run_logs_held_out_pairwise_accuracy(tmp_path):
    val = write_pairs(tmp_path / "val.jsonl", n=4)
    cfg = rm_config(tmp_path, max_steps=2, eval_steps=2,
                    validation={"data_args": {"file_name": val}})
    rows = [json.loads(x) for x in (run(cfg) / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert {"rm/loss", "rm/accuracy", "val/rm/accuracy", "val/rm/loss"} <= rows[-1].keys()
    assert rows[0]["rm/pairs_dropped_overlong"] == 0.0
    config = json.loads((tmp_path / "run" / "checkpoint-2" / "config.json").read_text())
    assert config["architectures"][0].endswith("ForSequenceClassification")
    assert config["num_labels"] == 1 if "num_labels" in config else len(config["id2label"]) == 1


@pytest.mark.parametrize(("extra", "key"), [
    ({"beta": 0.2}, "beta"),
    ({"reference": {}}, "reference"),
    ({"pipeline_type": "dpo", "margin_key": "m"}, "margin_key"),
    ({"actor_train": {"model_args": {"lora_target": "q_proj"},
                      "data_args": {"file_name": "x.jsonl"}}},
     "actor_train.model_args.lora_target"),
])
def test_dpo_keys_and_lora_are_refused(extra, key):
    data = {"pipeline_type": "reward_model",
            "actor_train": {"data_args": {"file_name": "x.jsonl"}}, **extra}
    with pytest.raises(ConfigError) as error:
        load_config_dict(data)
    assert error.value.key_path == key


@pytest.mark.long  # a reward-model run, then an RLVR run on Ray scored by its checkpoint
def test_an_rlvr_run_scores_with_the_trained_checkpoint(tmp_path):
    from tests.pipelines.sim_config import sim_config

    cfg = rm_config(tmp_path, max_steps=2)
    checkpoint = run(cfg) / "checkpoint-2"
    rl = load_config_dict(sim_config(tmp_path / "rl", 0, max_steps=2, eval_steps=0, rewards={
        "rm": {"reward_type": "reward_model",
               "model_args": {"model_name_or_path": str(checkpoint)}}}))
    rows = [json.loads(x) for x in (run(rl) / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all("reward/mean" in r for r in rows)


def test_frozen_modules_stay_as_loaded(tmp_path):
    """freeze_module_prefix in reward-model training (the times-tables RM's recipe trains
    only the top layers this way): the frozen parameters end bit-identical, the rest move."""
    cfg = rm_config(tmp_path, actor_train={
        "model_args": {"freeze_module_prefix": "model.embed_tokens, model.layers.0"},
        "training_args": {"learning_rate": 1e-2, "per_device_train_batch_size": 4},
        "data_args": {"file_name": write_pairs(tmp_path / "p.jsonl")}})
    path = resolve_pretrain(cfg.pretrain)
    tokenizer = load_tokenizer(path)
    pairs = load(cfg, "actor_train", tokenizer)
    strategy = reward_model_strategy(cfg, path)
    before = {n: p.detach().clone() for n, p in strategy.model.named_parameters()}
    for _ in range(2):
        strategy.train_step(pairs.batch(list(range(4)), tokenizer.pad_token_id),
                            BradleyTerryObjective())
    moved = {n for n, p in strategy.model.named_parameters() if not torch.equal(p, before[n])}
    frozen = {n for n in before if n.startswith(("model.embed_tokens.", "model.layers.0."))}
    assert frozen and not moved & frozen
    assert {n for n in before if n.startswith("model.layers.1.")} <= moved


def test_the_times_reward_model_recipe_loads_with_its_pairs(tmp_path):
    """The shipped recipe of builtin://smollm2-135m-times-rm is a valid reward_model config
    once the build fills in its pair files; the held-out pairs ask about other products."""
    from flywheel.workshop.times_reward_model import recipe_dict
    from flywheel.workshop.times_reward_model import write_pairs as times_pairs

    train, held_out = times_pairs(tmp_path / "pairs")
    cfg = load_config_dict(recipe_dict(train, held_out, tmp_path / "run"))
    assert cfg.pipeline_type == "reward_model"
    assert cfg.actor_train.data_args.file_name == [str(train)]

    def questions(path):  # the question, with or without the policy's chat text around it
        return {json.loads(x)["prompt"].split("user\n")[-1].removesuffix("\nassistant\n")
                for x in path.read_text().splitlines()}
    assert not questions(train) & questions(held_out)
