"""Language models from HuggingFace model folders, without PyTorch: ``checkpoint`` reads
a folder (its config and its safetensors weights, sharded or not, memory-mapped)."""
from .checkpoint import ARCHITECTURES, ArchitectureError, Checkpoint

__all__ = ["Checkpoint", "ArchitectureError", "ARCHITECTURES"]
