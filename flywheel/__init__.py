"""flywheel: YAML-declarative RL post-training for language models."""

from flywheel import lean_imports

lean_imports.install()
