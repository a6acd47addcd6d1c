"""`pipeline_type: online_dpo`: DPO on the policy's own scored samples, on the step loop."""
