"""Floor 1: JAX and XLA, below every stage. Every JAX internal behind one guard (adapter), the
GPUs the planner compiles for (gpus), which compiler makes a plan's figures (targets), a
deviceless target's devices standing in for this machine's (deviceless), lowering and
compiling (compile), reading compiled HLO (hlo, kernels, recompute_shares) and a step's
fingerprint (fingerprint), and the compiles of a session found again (memo)."""
