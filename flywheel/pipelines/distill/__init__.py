"""Distillation: on-policy on the step loop (a teacher role the RLVR and agentic rollouts
read), and offline on the shared update loop (`pipeline_type: distill`).

On-policy:
    teachers.py          what is checked at start (tokenizers, record tags, text prompts
                         under a context_template) and the prompt each teacher is shown
    teacher_scoring.py   teachers scoring finished groups beside the rewards; a teacher of
                         the student's own weights scoring on actor_train
    episode_teachers.py  teachers scoring agentic trajectories when the batch is packed
    opd_batch.py         their log-probs as batch extras, and the OPD term of the advantages

Offline:
    offline_run.py       the run: records, the teacher beside the student, steps,
                         validation, checkpoints
    teacher_topk.py      the teacher's top-k per position, on the fly or cached in chunks
    offline_objective.py the divergence mixed with SFT, as the update loop's Objective

The maths is in flywheel/algorithms/distill/, the keys in config/schema/distill.py and
offline_distill.py, the student's top-k head in workers/strategies/topk_head.py.
"""
