"""Infrastructure: config, devices, Ray clusters, tracking, checkpoints. Knows nothing about RL."""
