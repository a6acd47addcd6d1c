"""Offline distillation's keys (`pipeline_type: distill`, ROLL's distill pipeline): the
divergence to the teacher's top-k distribution and its mix with the SFT loss.

Part of the schema (`flywheel.config.schema` re-exports it as one `PipelineConfig`); every
field is documented once, here. ROLL's names and defaults (roll/pipeline/distill/
distill_config.py) where ROLL has the key; the maths is in flywheel/algorithms/distill/
(divergences.py, offline_loss.py), the run in pipelines/distill/offline_run.py, the checks
in config/checks/offline_distill.py. The teacher is the `teacher` block's one entry (its
model_args.model_name_or_path), as for on-policy distillation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from flywheel.platform.config.field_bounds import bounded

# the names of algorithms/distill/divergences.py DIVERGENCES (a test keeps them equal)
KdObjective = Literal["forward_kl", "reverse_kl", "adaptive_kl", "skewed_forward_kl",
                      "skewed_reverse_kl", "js_divergence"]


@dataclass
class OfflineDistillKeys:
    """A student trained on a teacher's next-token distributions over fixed records."""

    # The divergence D(p_teacher ‖ q_student) per token: forward_kl (Hinton et al. 2015:
    # mass-covering, the usual choice on a teacher's own responses), reverse_kl (MiniLLM:
    # mode-seeking), adaptive_kl (Wu et al. 2024: forward on the head, reverse on the tail,
    # weighted by their gaps), skewed_forward_kl / skewed_reverse_kl (DistiLLM: against a
    # mixture, stabler gradients early), js_divergence (symmetric, bounded by log 2).
    kd_objective: KdObjective = "forward_kl"
    # w in L = (1 − w)·SFT + w·divergence (ROLL's default 0.5): 1 is pure distillation,
    # 0 plain SFT on the records.
    distill_loss_weight: float = bounded(0.5, 0.0, 1.0)
    # k: the teacher's k most likely tokens per position are kept (cached or computed on
    # the fly); the divergence is over them (and, with kd_support tail, the rest as one
    # outcome). ROLL's default 64.
    logits_topk: int = bounded(64, 1, why="at least one token of the teacher's")
    # The student's logits are divided by kd_temperature, the teacher's by
    # kd_temperature × teacher_temperature, for the divergence only (the SFT term is at 1);
    # no T² factor (ROLL's convention).
    kd_temperature: float = bounded(1.0, 0.0, low_open=True)
    teacher_temperature: float = bounded(1.0, 0.0, low_open=True)
    # adaptive_kl only: the tail's mass bound α (the head is the teacher's most likely
    # tokens up to mass 1 − α).
    adaptive_kl_alpha: float = bounded(0.5, 0.0, 1.0)
    # skewed_* only: the mixing weight λ of the skewed side (DistiLLM's 0.1).
    skew_lambda: float = bounded(0.1, 0.0, 1.0)
    # Over which outcomes the top-k divergence is taken: tail (the k tokens plus "every
    # other token" with the remaining mass: true distributions, exact when k is the
    # vocabulary) or renormalized (ROLL's: both renormalized over the teacher's k tokens).
    kd_support: Literal["tail", "renormalized"] = "tail"
    # Whether the prompt's tokens are trained too (both terms), as ROLL's
    # distill_on_prompt; false: the response tokens only.
    distill_on_prompt: bool = False
    # A folder where the teacher's top-k are written in chunks the first time they are
    # computed and read back afterwards (later epochs, later runs on the same teacher and
    # records). Each cache lives in a subfolder named by a digest of the teacher's files,
    # the records' token ids, k, the temperature and the positions, so a changed teacher,
    # data or k never reads another's values. Unset: computed on the fly for each batch.
    teacher_logits_cache: str | None = None
    # Records per cache chunk (one file each).
    teacher_cache_chunk_rows: int = bounded(256, 1)
