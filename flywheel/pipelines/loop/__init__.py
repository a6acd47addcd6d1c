"""The RL step loop, the same for every pipeline kind, and the async machinery it drives:
the prefetch generator, the replay buffer and the window `async_generation_ratio` sets."""
