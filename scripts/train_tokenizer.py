"""Rebuild the shipped tiny-model tokenizer (agentsearch/data/assets/tokenizer)."""
from agentsearch.models import train_world_tokenizer

if __name__ == "__main__":
    print(train_world_tokenizer())
