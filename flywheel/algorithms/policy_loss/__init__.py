"""Policy-gradient losses, selected by name (`pg_variant`).

Each variant is one file holding one function with the `PolicyLossFn` signature: it gets
ℓ (log_probs, with grad), ℓ_old, token-level A, per-sample scores and `PolicyLossParams`,
and returns the per-token loss [B, T] plus per-token flags to report. Masking, stop-grads
on the inputs, aggregation and metrics live in `compute_policy_loss`, not in the variants.

    vanilla  -A·ℓ                                            (REINFORCE)
    ppo      -min(r·A, clip(r, 1-ε_low, 1+ε_high)·A), dual clip optional
    gspo     ppo's clip on the sequence ratio s = exp(mean_t(ℓ - ℓ_old)) (GSPO)
    tis      -sg(clip(r, lower, upper))·A·ℓ
    topr     -w₊·A·ℓ if score > 0 else -w₋·sg(clip(r, 0, 1))·A·ℓ
    cispo    -sg(clip(r, 1-ε_low, 1+ε_high))·A·ℓ, unified mask optional
    kimi15   -A·ℓ + (τ/2)·(ℓ - ℓ_old)²

To add a variant `foo`: write `policy_loss/foo.py` with `def foo_loss(log_probs,
old_log_probs, advantages, scores, params) -> (loss_mat, flags)`, formula and paper in its
docstring, and add one line `"foo": LossSpec("flywheel.algorithms.policy_loss.foo:foo_loss"),`
to `POLICY_LOSSES` in registry.py; then hand-computed tests in tests/algorithms/ (the
micro-batch invariance test picks it up from the catalog). A variant that needs each row's
length declares a keyword-only `response_mask` (params.py, PolicyLossFn). Outside the project:
`register_policy_loss("foo", LossSpec("package.module:foo_loss"))` before the config is
loaded. A variant reads its knobs from `PolicyLossParams` (params.py); a new knob is one field
in params.py's `VariantKnobs` (an actor_train key) or `PPOClipKnobs` (a top-level key), with
its comment: the config key, its default and its line in the configuration reference all
come from there, and an acts-when row (config/acts_when/table.py) says which variant reads it.

Nothing is imported here, so that reading the catalog (registry.py: what the config checks
do) imports no torch; import from the modules, or from `flywheel.algorithms`.
"""
