"""Log-probs of a model whose logits are not lm_head(hidden) (Gemma-2's final softcap) are
the model's own on every backend: hf_train, hf_infer (recorded and forward), deepspeed_train
at ZeRO 1 and 3 (whose `model.config` is DeepSpeed's dict, not the HF config), all equal to
log_softmax of the logits transformers computes. A softcap of 1.0 caps too."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from backend_cases import PROMPTS, max_diff_on

from flywheel.config.schema import StrategyArgs, TrainingArgs, WorkerConfig
from flywheel.workers.batch import pack_sequences
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.strategies.hf_model import own_logits
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.model_head import policy_head

T = 0.7
ATOL = 2e-5  # fp32, same weights: KV-cache decode or a chunked head vs one full forward


@pytest.fixture(scope="module")
def tiny_gemma2_path(tmp_path_factory, tiny_model_path) -> str:
    """A random Gemma-2 with tiny-qwen2's tokenizer, softcap 1.0, weights large enough
    that the cap changes the distribution a lot."""
    from transformers import AutoConfig, Gemma2Config, Gemma2ForCausalLM

    folder = tmp_path_factory.mktemp("tiny_gemma2")
    vocab = AutoConfig.from_pretrained(tiny_model_path).vocab_size
    config = Gemma2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                          head_dim=32, final_logit_softcapping=1.0, initializer_range=0.2,
                          bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    Gemma2ForCausalLM(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tiny_model_path, name), folder / name)
    return str(folder)


def reference_logprobs(model_path: str, batch, temperature: float = T) -> torch.Tensor:
    """log softmax(model(x).logits / T)[x_t+1]: the logits transformers computes (the cap
    applied), nothing of flywheel's."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    picked = torch.log_softmax(logits[:, :-1].float() / temperature, -1).gather(
        -1, batch.input_ids[:, 1:, None]).squeeze(-1)
    return torch.nn.functional.pad(picked, (1, 0))


@pytest.fixture(scope="module")
def gemma_batch(tiny_gemma2_path):
    infer = HFInferStrategy(tiny_gemma2_path, WorkerConfig(infer_batch_size=16), seed=0)
    gens = infer.generate(PROMPTS[:8], SamplingParams(max_new_tokens=6, n=1, temperature=T,
                                                      seed=3))
    batch = pack_sequences([PROMPTS[g.prompt_index] for g in gens],
                           [g.token_ids for g in gens], pad_id=0,
                           infer_log_probs=[g.log_probs for g in gens])
    return batch, infer


def test_a_softcap_of_one_still_caps():
    from transformers import CohereConfig, Gemma2Config, GraniteConfig

    class Model(torch.nn.Module):  # own_logits reads `config` and `base_model`
        def __init__(self, config):
            super().__init__()
            self.config, self.base_model = config, torch.nn.Linear(1, 1)

    assert own_logits(Model(Gemma2Config(final_logit_softcapping=1.0)))
    assert not own_logits(Model(Gemma2Config(final_logit_softcapping=None)))
    assert not own_logits(Model(CohereConfig(logit_scale=1.0)))  # z * 1: nothing to do
    assert own_logits(Model(CohereConfig(logit_scale=0.5)))
    assert not own_logits(Model(GraniteConfig(logits_scaling=1.0)))
    assert own_logits(Model(GraniteConfig(logits_scaling=8.0)))


def test_every_backend_scores_gemma2_by_its_softcapped_logits(tiny_gemma2_path, gemma_batch,
                                                              one_rank_group):
    pytest.importorskip("deepspeed")
    from flywheel.workers.strategies.deepspeed_train import DeepSpeedTrainStrategy

    batch, infer = gemma_batch
    want = reference_logprobs(tiny_gemma2_path, batch)
    mask = batch.response_mask
    head = policy_head(T, -1, 1.0, True)
    args = TrainingArgs(per_device_train_batch_size=4)
    got = {"hf_infer recorded": batch.infer_log_probs,
           "hf_train": HFTrainStrategy(tiny_gemma2_path, WorkerConfig(training_args=args),
                                       seed=0, total_steps=1, head=head
                                       ).forward_logprobs(batch)}
    for stage in (1, 3):
        cfg = WorkerConfig(training_args=args, strategy_args=StrategyArgs(
            strategy_name="deepspeed_train", strategy_config={"zero_stage": stage}))
        ds = DeepSpeedTrainStrategy(tiny_gemma2_path, cfg, seed=0, total_steps=1, head=head)
        got[f"deepspeed_train zero {stage}"] = ds.forward_logprobs(batch)
        del ds
    diffs = {name: max_diff_on(mask, lp, want) for name, lp in got.items()}
    # hf_infer's own log-prob pass (temperature 1)
    diffs["hf_infer forward (T=1)"] = max_diff_on(
        mask, infer.forward_logprobs(batch), reference_logprobs(tiny_gemma2_path, batch, 1.0))
    print("max |log-prob - softcapped reference|: " +
          ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    raw_gap = max_diff_on(mask, raw_lm_head_logprobs(tiny_gemma2_path, batch), want)
    print(f"(raw lm_head logits instead: {raw_gap:.2f})")
    assert raw_gap > 0.1  # the cap matters on this model: the test can tell
    assert all(d < ATOL for d in diffs.values()), diffs


def raw_lm_head_logprobs(model_path: str, batch) -> torch.Tensor:
    """What the uncapped head gives (the defect): log softmax(lm_head(hidden) / T)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        hidden = model.model(input_ids=batch.input_ids,
                             attention_mask=batch.attention_mask).last_hidden_state
        logits = model.lm_head(hidden)
    picked = torch.log_softmax(logits[:, :-1] / T, -1).gather(
        -1, batch.input_ids[:, 1:, None]).squeeze(-1)
    return torch.nn.functional.pad(picked, (1, 0))
