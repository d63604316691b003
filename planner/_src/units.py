"""Units, once: budgets are in GB = 10^9 bytes, the unit of GPU datasheets (H200: 141 GB)."""

GB = 1e9
MB = 1e6
KIB = 1024
