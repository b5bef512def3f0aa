"""Print the TrainConfig reference as a markdown table (pasted into the README)."""
from agentsearch.config import reference
from agentsearch.trainer.config import TrainConfig

if __name__ == "__main__":
    print("| key | default | meaning |\n|---|---|---|")
    for key, default, doc in reference(TrainConfig):
        print(f"| `{key}` | `{default}` | {doc.replace('|', '/')} |")
