"""Language models from HuggingFace model folders, without PyTorch:

    model = dlprim.llm.load("path/to/model")
    print(model.generate("Once upon a time", max_new_tokens=40).text)

``checkpoint`` reads a folder (its config and its safetensors weights, sharded or not,
memory-mapped); ``tokenizer`` its tokenizer.json, special tokens and chat template (the
``llm`` extra: tokenizers, jinja2); ``llama`` builds the Llama family's decoder (Llama
1-3, Mistral, Qwen2, Phi-3) and ``gpt2`` GPT-2's, each as a Net over a key/value cache;
``engine`` runs a batch of rows of that Net with the device's token sampler;
``scheduler`` moves requests through the rows (continuous batching); ``settings`` says
what a generation does; ``model`` is ``load`` and ``generate``."""
from .checkpoint import ARCHITECTURES, ArchitectureError, Checkpoint
from .engine import GenerationError
from .model import LanguageModel, load
from .scheduler import ContextError, Result
from .settings import GenerationSettings, SettingsError
from .tokenizer import StreamDecoder, Tokenizer, TokenizerError

__all__ = ["Checkpoint", "ArchitectureError", "ARCHITECTURES", "LanguageModel", "load",
           "GenerationError", "ContextError", "Result", "GenerationSettings", "SettingsError",
           "Tokenizer", "StreamDecoder", "TokenizerError"]
