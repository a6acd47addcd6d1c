"""On-policy self-distillation (teacher weights: student): the student scores its own
samples on a privileged prompt its context_template writes from the record, on actor_train,
with no teacher worker and no second model; and what such a teacher refuses."""

import pytest
import torch

from flywheel.config.derived import roles
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.data.prompt_data import PromptEncoder
from flywheel.pipelines.data.records import DataError, PromptRecord
from flywheel.pipelines.distill.teacher_scoring import score_on
from flywheel.pipelines.distill.teachers import check_teacher_contexts, teacher_prompt
from flywheel.pipelines.rlvr.generation import Group
from flywheel.pipelines.roles.roles import device_roles
from flywheel.platform.config.errors import ConfigError
from flywheel.workers.strategies.base import Generation

TEMPLATE = "{prompt}{answer}\n{prompt}"  # the answer shown once before the question again


def self_teacher(**extra):
    return {"teacher": {"me": {"weights": "student", "context_template": TEMPLATE, **extra}}}


def error_for(data):
    with pytest.raises(ConfigError) as info:
        load_config_dict(data, source="f.yaml")
    return info.value


def test_a_teacher_of_the_students_weights_is_no_role_and_takes_no_device():
    cfg = load_config_dict(self_teacher())
    assert [r.key_path for r in roles(cfg)] == ["actor_train", "actor_infer",
                                                "rewards.math_rule"]
    assert [r.role for r in device_roles(cfg)] == ["actor_train", "actor_infer"]


def test_what_a_self_teacher_refuses():
    error = error_for({"teacher": {"me": {"weights": "student"}}})
    assert error.key_path == "teacher.me.weights"
    assert "is itself (a 0 signal)" in error.message
    error = error_for({**self_teacher(), "actor_infer": {"generating_args": {"top_k": 5}}})
    assert "top_k / top_p" in error.message
    error = error_for(self_teacher(model_args={"model_name_or_path": "builtin://tiny-qwen2"}))
    assert error.key_path == "teacher.me.model_args"
    assert "weights: student scores on actor_train" in error.message
    error = error_for(self_teacher(context_template="{prompt.upper}"))
    assert error.key_path == "teacher.me.context_template"
    assert "takes {prompt}, {answer}, {tag}" in error.message
    with pytest.raises(DataError, match="chat messages"):
        check_teacher_contexts(load_config_dict(self_teacher()),
                               [PromptRecord("1", [{"role": "user", "content": "hi"}], "a",
                                             "")])


class InProcess:
    """actor_train's forward_logprobs as a plain transformers forward, in this process (the
    transport is the only stand-in: the model and the log-probs are real)."""

    world_size = 2

    def __init__(self, model):
        self.model = model

    def forward_logprobs(self, batch):
        with torch.no_grad():
            logits = self.model(batch.input_ids, attention_mask=batch.attention_mask).logits
        log_probs = torch.log_softmax(logits.float(), -1)
        picked = log_probs[:, :-1].gather(-1, batch.input_ids[:, 1:, None])[..., 0]
        out = torch.cat([torch.zeros(len(batch), 1), picked], 1)

        class Done:
            refs = [out]
        return Done()

    def gather(self, refs):
        return refs


def test_the_student_scores_its_samples_on_the_privileged_prompt(arith_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(arith_model_path)
    model = AutoModelForCausalLM.from_pretrained(arith_model_path).eval()
    cfg = load_config_dict(self_teacher())
    encoder = PromptEncoder(tokenizer)
    record = PromptRecord("0", "12+34=", "046", "")
    responses = [Generation(0, tokenizer.encode("046"), [-1.0] * 3, "stop"),
                 Generation(0, tokenizer.encode("05"), [-1.0] * 2, "stop"),
                 Generation(0, tokenizer.encode("1"), [-1.0], "stop")]
    group = Group(0, record, encoder(record.prompt), responses, version=0)
    prompt = teacher_prompt(cfg, encoder)
    shown = prompt("me", group)
    assert tokenizer.decode(shown, skip_special_tokens=True) == "12+34=046\n12+34="
    score_on(InProcess(model), ["me"], [group], {"me": ()}, prompt, tokenizer.pad_token_id)
    for response, scored in zip(responses, group.teacher_log_probs["me"]):
        ids = shown + response.token_ids
        with torch.no_grad():
            log_probs = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
        expected = [log_probs[t - 1, ids[t]].item()
                    for t in range(len(shown), len(ids))]
        assert scored == pytest.approx(expected, abs=1e-5)
