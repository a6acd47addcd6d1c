"""Which half-precision dtypes this CPU computes natively, read from /proc/cpuinfo.

Why: on a CPU without bf16 (fp16) instructions, `torch.autocast` emulates the dtype, and a
run in it is many times slower than in fp32. Measured on a 2-core
AMD EPYC with AVX2 only (SmolLM2-135M, 16 rows x 96 tokens, forward and backward): fp32
11-12 s a step, bf16 autocast over 100 s. The run start says so once per role
(`emulated_dtype_lines`), so a user on such a machine knows to write `dtype: fp32`.

x86: avx512_bf16 / amx_bf16 (bf16), avx512_fp16 / amx_fp16 (fp16); Arm: the bf16 and
fphp feature flags. An unreadable cpuinfo (not Linux) says nothing rather than guess.
"""

from __future__ import annotations

from pathlib import Path

NATIVE_FLAGS = {"bf16": {"avx512_bf16", "amx_bf16", "bf16"},
                "fp16": {"avx512_fp16", "amx_fp16", "fphp"}}


def cpu_flags(cpuinfo: str) -> set[str]:
    """The feature flags of the first processor in a /proc/cpuinfo text."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def emulated_dtypes(cpuinfo: str) -> set[str]:
    """The half dtypes this CPU lacks instructions for (none if its flags are unknown)."""
    flags = cpu_flags(cpuinfo)
    if not flags:
        return set()
    return {dtype for dtype, native in NATIVE_FLAGS.items() if not flags & native}


def emulated_dtype_lines(dtypes: dict[str, str], cpuinfo: str | None = None) -> list[str]:
    """One start-up line per role (key path -> its model_args.dtype) whose dtype this CPU
    emulates."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.is_file() else ""
    slow = emulated_dtypes(cpuinfo)
    return [f"{role}.model_args.dtype: {dtype} is emulated on this CPU (no native {dtype} "
            f"instructions in /proc/cpuinfo): expect it many times slower than fp32; "
            f"write dtype: fp32 on this machine"
            for role, dtype in dtypes.items() if dtype in slow]
