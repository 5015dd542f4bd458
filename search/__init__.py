"""Search: candidates, policies, operators, evaluator, executors, run store."""
