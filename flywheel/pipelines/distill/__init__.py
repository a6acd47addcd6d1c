"""On-policy distillation on the step loop (a teacher role the RLVR rollout reads):

    teachers.py         what is checked at start (tokenizers, record tags, text prompts
                        under a context_template) and the prompt each teacher is shown
    teacher_scoring.py  teachers scoring finished groups beside the rewards; a teacher of
                        the student's own weights scoring on actor_train
    opd_batch.py        their log-probs as batch extras, and the OPD term of the advantages

The maths is in flywheel/algorithms/distill/, the keys in config/schema/distill.py.
"""
