"""A character-level GPT on Shakespeare (config.json, data/shakespeare.txt, sample.py)."""
