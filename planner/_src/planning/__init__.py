"""The driver: a Planner traces a step once and plans any number of budgets, each through
small steps over typed records (one_budget.py says the order). Train-state placement,
throughput (batch x policy) and MaxText plan through the Planner's public members."""
