"""Every flywheel process imports transformers without scikit-learn.

transformers imports `sklearn.metrics` whenever scikit-learn is installed (mlflow, the
default tracker, depends on it) for one function, `roc_curve`, which only its assisted
decoding's adaptive confidence threshold uses; flywheel never decodes that way. The import
drags in scipy.stats and pandas: about a fifth of the CPU a train or infer worker spends
importing its modules, paid again by every worker process of every run.

`install()` adds an import hook that, just before transformers imports its generation
module `candidate_generator`, tells it scikit-learn is absent; transformers then skips the
import and disables that threshold, as on a machine without scikit-learn. Nothing else
changes: `import sklearn` works as before, for user code included. The hook is a no-op
when transformers is laid out otherwise (its `utils` not yet imported, or a version
without `is_sklearn_available`).
"""

from __future__ import annotations

import importlib.abc
import sys

TRIGGER = "transformers.generation.candidate_generator"


class _NoSklearnForTransformers(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # noqa: ANN001 (importlib's signature)
        if name == TRIGGER:
            utils = sys.modules.get("transformers.utils")
            if utils is not None and hasattr(utils, "is_sklearn_available"):
                utils.is_sklearn_available = lambda: False
        return None  # the regular finders import the module


def install() -> None:
    if not any(isinstance(f, _NoSklearnForTransformers) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoSklearnForTransformers())
