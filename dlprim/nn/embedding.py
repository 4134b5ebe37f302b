"""Embedding: rows of a learned table picked by integer indices."""
from .module import Module
from .shapes import positive_int
from .value import Value

__all__ = ["Embedding"]


class Embedding(Module):
    """A table ``weight`` of ``num_embeddings`` rows of ``embedding_dim``; an int input of
    any shape gives shape + (embedding_dim,). ``padding_idx``'s row gets no gradient.
    The net's input must then be integers: ``model.netconfig(shape, dtype="int64")``."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None):
        super().__init__()
        self.num_embeddings = positive_int(num_embeddings, "Embedding num_embeddings")
        self.embedding_dim = positive_int(embedding_dim, "Embedding embedding_dim")
        if padding_idx is not None and (isinstance(padding_idx, bool) or not isinstance(padding_idx, int)
                                        or not -num_embeddings <= padding_idx < num_embeddings):
            raise ValueError("Embedding padding_idx must be None or an index into the %d rows, "
                             "got %r" % (num_embeddings, padding_idx))
        self.padding_idx = padding_idx

    def own_parameters(self) -> list:
        return ["weight"]

    def forward(self, x: Value) -> Value:
        trace = x.trace
        if x.dtype not in ("int", "int64"):
            trace.fail("takes integer indices, got a %s input (build the net with "
                       "netconfig(..., dtype=\"int64\"))" % x.dtype)
        options = {"num_embeddings": self.num_embeddings, "embedding_dim": self.embedding_dim}
        if self.padding_idx is not None:
            options["padding_idx"] = self.padding_idx
        return trace.add("Embedding", [x], x.shape + (self.embedding_dim,), options=options,
                         params=trace.param_names(["weight"]))

    def extra_repr(self) -> str:
        return "%d, %d" % (self.num_embeddings, self.embedding_dim)
