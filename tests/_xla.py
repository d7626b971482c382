"""The suite's quick compile options: for the suite (tests/conftest.py) and the processes it starts."""

QUICK_XLA_FLAGS = (
    "--xla_cpu_use_fusion_emitters=false",
    "--xla_llvm_disable_expensive_passes=true",
    "--xla_backend_optimization_level=0",
    "--xla_cpu_parallel_codegen_split_count=1",
)
"""The legacy elemental emitters, no expensive LLVM passes, the backend at optimisation level 0 (the
measurements are in tests/conftest.py), one LLVM module per program (XLA splits it for parallel codegen;
with both cores already busy with two test workers, the split costs: test_banded, test_pn and
test_gaussian_core 146 s against 161 s, test_partitions and test_graph_from_model 65 s against 71 s):
for the suite's hundreds of one-off programs, which compile for longer than they run at test size."""
