"""The suite's quick compile options: for the suite (tests/conftest.py) and the processes it starts."""

QUICK_XLA_FLAGS = (
    "--xla_cpu_use_fusion_emitters=false",
    "--xla_llvm_disable_expensive_passes=true",
    "--xla_backend_optimization_level=0",
)
"""The legacy elemental emitters, no expensive LLVM passes, the backend at optimisation level 0 (the
measurements are in tests/conftest.py): for the suite's hundreds of one-off programs, which compile for
longer than they run at test size."""
