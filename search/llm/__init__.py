"""The LLM half of the search: a client with record/replay, prompts, reply parsing, operators."""
