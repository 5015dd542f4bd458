"""Knowledge: hardware and backend notes, prompt templates, retrieval."""
