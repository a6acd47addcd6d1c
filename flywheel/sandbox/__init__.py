"""Running untrusted programs in a bubblewrap sandbox: what the code_sandbox reward and the
`python` tool both import (bwrap.py holds the design notes and the limits).

It sits beside workers/ and tools/ rather than inside either, because both run model-written
code with the same limits (`CodeSandboxArgs`); it imports only the config schema.
"""

from flywheel.sandbox.bwrap import (
    LANGUAGES,
    RunOutcome,
    SandboxUnavailable,
    check_sandbox,
    run_sandboxed,
)

__all__ = ["LANGUAGES", "RunOutcome", "SandboxUnavailable", "check_sandbox", "run_sandboxed"]
