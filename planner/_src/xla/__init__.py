"""Floor 1: JAX and XLA. Every JAX internal behind one guard (adapter), the GPUs the planner
compiles for (gpus), which compiler makes a plan's figures (targets), a deviceless target's
devices standing in for this machine's (deviceless), compiling (compile), reading what a
compile says (figures, hlo, kernels) and a step's fingerprint (fingerprint)."""
