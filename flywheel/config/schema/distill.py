"""On-policy distillation's keys: the `teacher` blocks and how their signal is used.

Part of the schema (`flywheel.config.schema` re-exports it as one `PipelineConfig`); every
field is documented once, here, beside its definition. The maths is in
flywheel/algorithms/distill/opd_advantage.py, the checks in config/checks/distill.py.

ROLL's shape: a teacher added to an RLVR run. ROLL writes one teacher as a block and
several as a mapping of named blocks; flywheel always names them (`teacher: {name:
{...}}`), and `platform convert --from roll` names ROLL's single block `default`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from flywheel.config.schema.roles import WorkerConfig
from flywheel.platform.config.field_bounds import bounded


@dataclass
class TeacherConfig(WorkerConfig):
    """One teacher: a model that scores the student's sampled tokens (a forward pass, no
    training), on a training backend (hf_train, deepspeed_train, megatron_train), on its
    own `device_mapping`. Its log-probs are at actor_infer's temperature with no top-k /
    top-p truncation, as the reference's are. Its tokenizer must be the student's (checked
    at start: the teacher scores the student's token ids as they are)."""

    # The weight c of this teacher's term: its per-token advantage is
    # c·(log π_teacher − log π_student) on the rows it takes (ROLL's opd_kl_coef).
    opd_kl_coef: float = bounded(1.0, 0.0, why="a negative weight would reward moving "
                                                "away from the teacher")
    # The data tags (a record's `tag`, the domains) whose rows this teacher scores; empty:
    # every tag. A tag no teacher takes is refused at start (ROLL's tag_included).
    tag_included: list[str] = field(default_factory=list)
    # Whose weights score: own (the teacher's model_args model, on its own workers), or
    # student (on-policy self-distillation, prime-rl's opsd: actor_train's current weights,
    # scored on actor_train right before its update, so never stale; no second model is
    # loaded and the teacher's model, backend and device keys are refused). student needs
    # context_template: on the student's own context it would score itself (a 0 signal).
    weights: Literal["own", "student"] = "own"
    # The teacher's prompt, written from the record, e.g. "{prompt} (the answer is
    # {answer}) ": privileged context the student does not see (a reference answer, a
    # hint). Placeholders: {prompt} (the record's text prompt), {answer}, {tag}; encoded by
    # actor_train's data_args template like the student's prompt. Unset: the student's
    # prompt.
    context_template: str | None = None


OpdMode = Literal["pure", "mixed"]


@dataclass
class DistillKeys:
    """On-policy distillation (OPD): the student samples, teachers score its tokens."""

    # The teachers by name; unset or empty: no distillation. A teacher's name appears in
    # its metrics (distill/reverse_kl/<name>).
    teacher: dict[str, TeacherConfig] = field(default_factory=dict)
    # pure: the advantage is the teachers' per-token signal alone (the rewards still score
    # every response, for the metrics and validation; ROLL's is_pure_opd). mixed: the
    # verifier rewards' advantage (adv_estimator) plus the teachers' (ROLL's use_opd).
    # Acts only with a teacher.
    opd_mode: OpdMode = "pure"
    # Discount of the teachers' per-token signal: each token's advantage is the
    # discounted sum of the signal from it to the end of the response. 0 (the default,
    # ROLL's and the usual OPD): each token its own log-ratio; 1: the reverse KL of the
    # rest of the response (MiniLLM's return). Acts only with a teacher.
    opd_gamma: float = bounded(0.0, 0.0, 1.0)
