"""The async invariants with image prompts (issue 29, item 4): one step ahead with partial
rollouts, the tiny random Idefics3, real Ray actors. Every trained sample keeps the
staleness bound, no group is trained twice, and at learning rate 0 the sampler's log-probs
are the trainer's with the images in context. On vllm (the suite's one VL engine) weights
load under running image requests (its encoder cache is reset with each load); on
hf_infer (`long`) responses continued on new weights carry their prompt's images into each
segment (generation.segment_images: a continuation whose prompt holds the expanded image
tokens and no pixels fails the request)."""

from __future__ import annotations

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.run.launch import run

from .test_image_rlvr_run import config
from .test_partial_rollout import check_run


# vllm in the suite: one VL engine, its in-flight weight loads under running image
# requests; hf_infer (`long`): its responses continue in segments, each carrying the
# prompt's images again
@pytest.mark.parametrize("infer", ["vllm", pytest.param("hf_infer", marks=pytest.mark.long)])
@pytest.mark.slow
def test_image_prompts_one_step_ahead_with_partial_rollouts(tmp_path, ray_session,
                                                           tiny_idefics3_path, infer, capsys):
    # a batch's generation (16 tokens; on hf_infer 16 one-token segments) outlasts a train
    # step several times over, so syncs land under its responses from step 3 on; 8 tokens
    # and 3 steps left that to a race a busy machine sometimes lost
    segments = {"partial_rollout_segment_tokens": 1} if infer == "hf_infer" else {}
    data = config(tmp_path, tiny_idefics3_path, async_generation_ratio=1, max_steps=4,
                  eval_steps=0, partial_rollout=True, response_length=16, **segments)
    data["actor_infer"]["device_mapping"] = [1]
    data["actor_infer"]["strategy_args"]["strategy_name"] = infer
    data["actor_train"]["training_args"]["learning_rate"] = 0.0
    del data["validation"]
    cfg = load_config_dict(data)
    steps = check_run(run(cfg), cfg, bound=1)
    # the tower is frozen (vision_model): the syncs leave it out, and the engine's stays
    assert "weight sync sends: every weight but actor_train's frozen modules (vision_model)" \
        in capsys.readouterr().out
    # weights changed under some responses: their later tokens came from newer weights
    assert sum(m["rollout/partial_frac"] for m in steps) > 0, steps
    for m in steps:  # same weights, same images: the sampler's log-probs are the trainer's
        assert abs(m["offpolicy/k3_kl"]) < 1e-6, m["offpolicy/k3_kl"]
