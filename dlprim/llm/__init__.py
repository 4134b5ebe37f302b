"""Language models from HuggingFace model folders, without PyTorch: ``checkpoint`` reads
a folder (its config and its safetensors weights, sharded or not, memory-mapped);
``llama`` builds the Llama family's decoder (Llama, Mistral, Qwen2) as a Net over a
key/value cache."""
from .checkpoint import ARCHITECTURES, ArchitectureError, Checkpoint
from .model import LanguageModel, load

__all__ = ["Checkpoint", "ArchitectureError", "ARCHITECTURES", "LanguageModel", "load"]
